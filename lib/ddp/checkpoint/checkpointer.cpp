#include "ddp/checkpoint/checkpointer.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/model/rank_random.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

torch::Tensor scalar(int64_t value) { return torch::tensor({value}, torch::kLong); }

int64_t read_scalar(torch::serialize::InputArchive& archive, const std::string& key, const std::string& path) {
  torch::Tensor value;
  if (!archive.try_read(key, value)) throw FileError(path + ": not a ddprun checkpoint (no '" + key + "')");
  return value.item<int64_t>();
}

// The checkpoint a file of the directory belongs to: its stem ("step_0000000020"), or "".
std::string stem_of(const std::string& name) {
  constexpr std::size_t kStem = 15;  // "step_" and ten digits
  return name.size() > kStem && name.rfind("step_", 0) == 0 && name[kStem] == '.' ? name.substr(0, kStem) : "";
}

}  // namespace

std::string checkpoint_stem(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%010lld", static_cast<long long>(step));
  return name;
}

uint32_t crc32_of(std::string_view data, uint32_t previous) {
  uLong crc = previous;  // crc32(0L, Z_NULL, 0) is 0: the CRC of no bytes
  // zlib takes uInt lengths; feed large buffers in pieces.
  for (std::size_t offset = 0; offset < data.size(); offset += 1u << 30) {
    std::size_t n = std::min<std::size_t>(1u << 30, data.size() - offset);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + offset), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

std::string verify_file(const std::string& path, uint64_t bytes, uint32_t crc, std::string* data) {
  std::string read;
  try {
    read = read_whole_file(path);
  } catch (const FileError& e) {
    return e.what();
  }
  if (read.size() != bytes)
    return path + " is truncated or padded: " + std::to_string(read.size()) + " bytes, manifest says " +
           std::to_string(bytes);
  if (crc32_of(read) != crc) return path + " is corrupt: CRC-32 does not match its manifest";
  if (data) *data = std::move(read);
  return "";
}

Checkpointer::Checkpointer(const CheckpointConfig& config, std::string directory)
    : config_(config), directory_(std::move(directory)) {}

void Checkpointer::write_run_identity(YAML::Emitter& manifest) const {
  manifest << YAML::Key << "config" << YAML::Value << YAML::DoubleQuoted << identity_.config;
  manifest << YAML::Key << "data" << YAML::Value << YAML::DoubleQuoted << identity_.data;
  if (!identity_.model_code.empty()) manifest << YAML::Key << "model_code" << YAML::Value << identity_.model_code;
}

RunIdentity read_run_identity(const std::string& manifest) {
  RunIdentity identity;
  try {
    YAML::Node root = YAML::Load(manifest);
    if (root["config"]) identity.config = root["config"].as<std::string>();
    if (root["data"]) identity.data = root["data"].as<std::string>();
    if (root["model_code"]) identity.model_code = root["model_code"].as<std::string>();
  } catch (const YAML::Exception&) {
  }  // an unreadable manifest fails its own verification
  return identity;
}

void Checkpointer::ensure_directory() const {
  std::error_code ec;
  bool created = fs::create_directories(directory_, ec);
  if (ec) throw_output_error("cannot create checkpoint directory " + directory_ + ": " + ec.message(), ec.value());
  if (created) fsync_directory(fs::path(directory_).parent_path().string());  // its entry must survive a crash
}

void Checkpointer::commit(int64_t step, const std::string& manifest) {
  // The manifest is the commit marker: written last, so a crash before it leaves no checkpoint.
  const std::string stem = checkpoint_stem(step);
  write_file_atomically(directory_ + "/" + stem + ".json", manifest);
  auto all = list();
  std::error_code ec;
  for (std::size_t i = static_cast<std::size_t>(config_.keep_last); i < all.size(); ++i)
    if (all[i].step != step) fs::remove(all[i].manifest_path, ec);  // never the one just written
  // Manifests first, so a half-pruned checkpoint is never complete; then their data files, which
  // no manifest commits any more, with whatever an earlier crash left.
  remove_leftovers(stem);
}

void Checkpointer::remove_leftovers(const std::string& current) const {
  // A crash between a data file and its manifest leaves a data file no manifest commits, and one
  // inside write_file_atomically a temporary: neither is a checkpoint, and nothing else removes them.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    std::string name = entry.path().filename().string();
    std::string stem = stem_of(name);
    bool temporary = name.find(".tmp.") != std::string::npos;
    // The step just committed keeps its files, not a temporary a killed earlier try at it left.
    if (stem.empty() || (stem == current && !temporary)) continue;
    bool orphan = entry.path().extension() == ".pt" && !fs::exists(directory_ + "/" + stem + ".json");
    if (temporary || orphan) fs::remove(entry.path(), ec);
  }
}

void Checkpointer::remove_all_but(const std::set<int64_t>& steps) const {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    const std::string name = entry.path().filename().string();
    std::string stem = stem_of(name);
    bool temporary = name.find(".tmp.") != std::string::npos;  // every write is done: a killed one's
    if (!stem.empty() && (temporary || !steps.count(std::stoll(stem.substr(5))))) fs::remove(entry.path(), ec);
  }
}

std::vector<CheckpointInfo> Checkpointer::list() const {
  std::vector<CheckpointInfo> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    auto name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || entry.path().extension() != ".json") continue;
    CheckpointInfo info = checkpoint_at(entry.path().string());
    try {
      YAML::Node manifest = YAML::LoadFile(info.manifest_path);
      info.step = manifest["step"].as<int64_t>();
      info.world_size = manifest["world_size"].as<int64_t>();
      info.sharded = manifest["shards"].IsDefined();
    } catch (const std::exception&) {
      info.step = -1;  // unreadable manifest: listed so verify can report it
    }
    // A manifest is named for its step. One that says another (copied or renamed by hand) would stand
    // for a checkpoint it is not, and the run's next save at its name's step would write over the
    // files it hid, without a word.
    const std::string digits = name.substr(5, name.find('.') - 5);
    if (info.step >= 0 && !digits.empty() && digits.size() <= 18 &&
        digits.find_first_not_of("0123456789") == std::string::npos && std::stoll(digits) != info.step) {
      info.damage = "it records step " + std::to_string(info.step) + " but is named for step " +
                    std::to_string(std::stoll(digits)) + " (copied or renamed by hand?)";
      info.step = -1;
    }
    found.push_back(info);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.step != b.step ? a.step > b.step : a.manifest_path > b.manifest_path;
  });
  return found;
}

std::vector<std::string> Checkpointer::without_manifest() const {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !name.ends_with(".pt")) continue;
    const std::string stem = name.substr(0, name.find('.'));  // step_N of step_N.common.pt, step_N.shard-0-of-2.pt
    if (!fs::exists(fs::path(directory_) / (stem + ".json"), ec)) found.push_back(entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

namespace {

// The files a checkpoint's manifest (format 2) names, each once: its common file first, then its
// shards (a whole checkpoint's one shard is its common file); empty for format 1, whose data file
// is its manifest's stem, or for a manifest that does not say (verify_checkpoint reports it).
std::vector<std::string> data_files_of(const std::string& manifest_path) {
  std::vector<std::string> files;
  try {
    YAML::Node manifest = YAML::LoadFile(manifest_path);
    if (!manifest["common"] || !manifest["common"]["file"]) return files;
    files.push_back(manifest["common"]["file"].as<std::string>());
    if (manifest["shards"] && manifest["shards"].IsSequence())
      for (const auto& shard : manifest["shards"])
        if (shard["file"] && std::find(files.begin(), files.end(), shard["file"].as<std::string>()) == files.end())
          files.push_back(shard["file"].as<std::string>());
  } catch (const std::exception&) {
    files.clear();
  }
  return files;
}

// How a checkpoint is named in a message: its data file when it has one of the stem's name (a whole
// checkpoint), else its manifest (a sharded one's step_N.pt does not exist).
std::string shown_path(const CheckpointInfo& checkpoint) {
  std::error_code ec;
  return fs::exists(checkpoint.data_path, ec) ? checkpoint.data_path : checkpoint.manifest_path;
}

}  // namespace

CheckpointInfo checkpoint_at(const std::string& path) {
  fs::path stem(path);
  if (stem.extension() == ".json" || stem.extension() == ".pt") stem.replace_extension();
  // A file of a checkpoint in several (step_N.common.pt, step_N.shard-0-of-2.pt): its manifest is step_N's.
  const std::string name = stem.filename().string();
  if (name.rfind("step_", 0) == 0 && name.find('.') != std::string::npos)
    stem.replace_filename(name.substr(0, name.find('.')));
  CheckpointInfo info;
  info.manifest_path = stem.string() + ".json";
  info.data_path = stem.string() + ".pt";
  return info;
}

std::string verify_checkpoint(const CheckpointInfo& checkpoint) {
  YAML::Node manifest;
  try {
    manifest = YAML::LoadFile(checkpoint.manifest_path);
  } catch (const std::exception& e) {
    return "unreadable manifest " + checkpoint.manifest_path;
  }
  try {  // a damaged manifest is a problem to report, not an exception to escape find_resume_point()
    if (!manifest["format_version"] || manifest["format_version"].as<int>() < 1 ||
        manifest["format_version"].as<int>() > Checkpointer::kFormatVersion)
      return "unsupported format version in " + checkpoint.manifest_path;
    // Sharded: the common file here; each rank verifies the shards it reads (they may be on its node only).
    YAML::Node data = manifest["shards"] ? manifest["common"] : manifest;
    std::string path = manifest["shards"]
                           ? (fs::path(checkpoint.manifest_path).parent_path() / data["file"].as<std::string>()).string()
                           : checkpoint.data_path;
    return verify_file(path, data["bytes"].as<uint64_t>(), data["crc32"].as<uint32_t>());
  } catch (const YAML::Exception&) {
    return "malformed manifest " + checkpoint.manifest_path + " (needs format_version, bytes and crc32)";
  }
}

std::optional<CheckpointInfo> Checkpointer::find_resume_point(int64_t older_than) const {
  if (config_.resume == "never") {
    // New checkpoints would be mixed with (and pruned against) an earlier run's.
    auto earlier = list();
    if (!earlier.empty())
      throw FileError("checkpoint.resume is never, but " + directory_ + " holds checkpoints of an earlier run (newest: " +
                      shown_path(earlier.front()) + "); remove them or choose another run.output_dir");
    return std::nullopt;
  }
  if (config_.resume != "auto") {
    const fs::path named(config_.resume);
    if (fs::is_directory(named))
      throw FileError("checkpoint.resume: " + config_.resume +
                      " is a directory: name a checkpoint in it (its .pt or .json), or resume: auto resumes the "
                      "newest one of run.output_dir");
    CheckpointInfo info = checkpoint_at(config_.resume);
    if (!fs::exists(info.manifest_path)) {
      if (!fs::exists(named)) throw FileError("checkpoint.resume: " + config_.resume + ": no such file");
      throw FileError("checkpoint.resume: " + config_.resume + " has no manifest " + info.manifest_path);
    }
    // The manifest says which file holds the state: a file the user named must be that one, or a
    // copied or renamed manifest would resume from another file than the one asked for. (A sharded
    // checkpoint's STEM.pt is no file: its manifest names the common file and the shards.)
    // Any file it names stands for the checkpoint (one shard of it, say).
    if (named.extension() == ".pt" && fs::exists(named))
      if (auto holds = data_files_of(info.manifest_path);
          !holds.empty() && std::find(holds.begin(), holds.end(), named.filename().string()) == holds.end())
        throw FileError("checkpoint.resume: " + info.manifest_path + " is the manifest of " + holds.front() +
                        (holds.size() > 1 ? " and " + std::to_string(holds.size() - 1) + " shard(s)" : "") +
                        ", not of " + named.filename().string() +
                        ": a checkpoint is its manifest and the files it names, renamed together if at all; "
                        "name the manifest to resume from what it names");
    if (auto problem = verify_checkpoint(info); !problem.empty()) throw FileError("checkpoint.resume: " + problem);
    info.step = YAML::LoadFile(info.manifest_path)["step"].as<int64_t>(-1);
    return info;
  }
  auto candidates = list();
  for (const auto& candidate : candidates)  // listed last, but it may have been the newest
    if (candidate.step < 0)
      spdlog::warn("ignoring {}: {}", candidate.manifest_path,
                   candidate.damage.empty() ? "not a readable manifest (a damaged checkpoint)" : candidate.damage);
  for (const auto& candidate : candidates) {
    if (candidate.step < 0 || candidate.step >= older_than) continue;
    auto problem = verify_checkpoint(candidate);
    if (problem.empty()) return candidate;
    spdlog::warn("skipping checkpoint {}: {}; trying the previous one", shown_path(candidate), problem);
  }
  return std::nullopt;
}

std::optional<CheckpointInfo> Checkpointer::newest_after(int64_t step) const {
  for (const auto& candidate : list())
    if (candidate.step > step && verify_checkpoint(candidate).empty()) return candidate;
  return std::nullopt;
}

std::pair<std::vector<int64_t>, std::string> Checkpointer::set_aside_after(int64_t step) const {
  std::vector<CheckpointInfo> later;
  for (const auto& checkpoint : list())
    if (checkpoint.step > step) later.push_back(checkpoint);
  if (later.empty()) return {};
  std::string folder;
  for (int n = 1; folder.empty() || fs::exists(folder); ++n) folder = directory_ + "/superseded-" + std::to_string(n);
  std::error_code ec;
  fs::create_directory(folder, ec);
  if (ec) throw_output_error("cannot create " + folder + ": " + ec.message(), ec.value());
  auto move = [&](const fs::path& from) {
    fs::rename(from, fs::path(folder) / from.filename(), ec);
    if (ec) throw_output_error("cannot move " + from.string() + " into " + folder + ": " + ec.message(), ec.value());
  };
  std::vector<int64_t> steps;
  // One checkpoint at a time, its manifest first: a crash part way leaves no complete checkpoint
  // of the other history here, and at most one without its data there.
  for (const auto& checkpoint : later) {
    const std::string stem = stem_of(fs::path(checkpoint.manifest_path).filename().string());
    move(checkpoint.manifest_path);
    std::vector<fs::path> data;
    for (const auto& entry : fs::directory_iterator(directory_, ec))
      if (!stem.empty() && stem_of(entry.path().filename().string()) == stem) data.push_back(entry.path());
    for (const auto& path : data) move(path);
    steps.push_back(checkpoint.step);
  }
  fsync_directory(folder);
  fsync_directory(directory_);
  return {steps, folder};
}

void write_progress(torch::serialize::OutputArchive& archive, const TrainProgress& progress, int world_size,
                    const std::vector<torch::Tensor>& rank_rng) {
  archive.write("format_version", scalar(Checkpointer::kFormatVersion));
  archive.write("step", scalar(progress.step));
  archive.write("epoch", scalar(progress.epoch));
  archive.write("batch_in_epoch", scalar(progress.batch_in_epoch));
  archive.write("batch_size", scalar(progress.batch_size));
  archive.write("accum_steps", scalar(progress.accum_steps));
  archive.write("world_size", scalar(world_size));
  archive.write("lr", torch::tensor({progress.lr}, torch::kDouble));
  archive.write("lr_ranks", scalar(progress.lr_ranks));
  archive.write("eval_pending", scalar(progress.eval_pending ? 1 : 0));
  archive.write("rng/cpu", rank_cpu_generator().get_state());  // not a tensor region's
  for (std::size_t r = 0; r < rank_rng.size(); ++r) archive.write("rng/cpu_rank" + std::to_string(r), rank_rng[r]);
}

TrainProgress read_progress(torch::serialize::InputArchive& archive, const std::string& source) {
  TrainProgress progress;
  progress.step = read_scalar(archive, "step", source);
  progress.epoch = read_scalar(archive, "epoch", source);
  progress.batch_in_epoch = read_scalar(archive, "batch_in_epoch", source);
  progress.world_size = read_scalar(archive, "world_size", source);
  torch::Tensor batch_size;
  if (archive.try_read("batch_size", batch_size)) progress.batch_size = batch_size.item<int64_t>();
  torch::Tensor accum_steps;
  if (archive.try_read("accum_steps", accum_steps)) progress.accum_steps = accum_steps.item<int64_t>();
  torch::Tensor lr;
  if (archive.try_read("lr", lr)) progress.lr = lr.item<double>();
  torch::Tensor lr_ranks;
  if (archive.try_read("lr_ranks", lr_ranks)) progress.lr_ranks = lr_ranks.item<int64_t>();
  torch::Tensor eval_pending;  // older checkpoints: their evaluation is done
  if (archive.try_read("eval_pending", eval_pending)) progress.eval_pending = eval_pending.item<int64_t>() != 0;
  return progress;
}

void restore_rng(torch::serialize::InputArchive& archive, int rank) {
  torch::Tensor rng;
  if (archive.try_read("rng/cpu_rank" + std::to_string(rank), rng) || archive.try_read("rng/cpu", rng)) {
    at::Generator generator = rank_cpu_generator();  // the global one, but in threads mode the rank thread's
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  }
}

}  // namespace ddp
