#include "ddp/checkpoint/sharded_checkpoint.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "ddp/comm/collectives.h"
#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/parallel/optimizer_state.h"

namespace ddp {

// Note [Sharded checkpoints]
// A checkpoint of step N under checkpoint.format sharded is, in the checkpoint directory:
//   step_N.shard-S-of-K.pt  one per shard of the data-shard group, written by its rank of data
//                           replica 0: for each run of a parameter's elements that rank keeps
//                           (OwnedRange: a piece of a flat shard, a whole tensor under ZeRO-1),
//                           the values and the optimizer state (step count and moments);
//   step_N.common.pt        rank 0's: the progress, the buffers, every rank's generator state;
//   step_N.json             the manifest, written last by rank 0 once every shard is on disk: world
//                           size and mesh, each parameter's name and shape, each file's size and
//                           CRC-32, and for each shard its runs (parameter, first element, count).
// The runs say where every element is, whatever layout wrote them, so a resume at any layout
// (another world size, another dist.shard, none) reads the shard files whose runs overlap its own
// and copies the overlaps: resharding is interval intersection on flattened parameters. A rank
// reads only what it keeps: at the same layout its own shard; replicated, all of them. Every rank
// checks the CRC-32 of what it reads, and the ranks agree before any restores, so a damaged shard
// seen by one rank sends all of them to the previous checkpoint (checkpoint.resume: auto) or fails
// all of them with that rank's message. The checkpoint directory must be readable where the shards
// are needed: shared storage, or one node; checkpoint.format whole is the choice otherwise.

namespace {

namespace fs = std::filesystem;

std::string shard_file(int64_t step, int shard, int shards) {
  return checkpoint_stem(step) + ".shard-" + std::to_string(shard) + "-of-" + std::to_string(shards) + ".pt";
}

std::string range_key(std::size_t k, const std::string& what) { return "r" + std::to_string(k) + "/" + what; }

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

// Model buffers, each tensor once, by name (the checkpoint's common file holds them).
std::vector<std::pair<std::string, torch::Tensor>> unique_buffers(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> buffers;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : model.named_buffers())
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) buffers.emplace_back(item.key(), item.value());
  return buffers;
}

// What every rank tells the others after writing its shard: "ok BYTES CRC" and its runs, or the error.
std::string shard_report(const ShardLayout& layout, const std::string& data) {
  std::ostringstream out;
  out << "ok " << data.size() << " " << crc32_of(data) << "\n";
  for (const auto& range : layout.ranges)
    out << range.parameter << " " << range.begin << " " << range.value.numel() << "\n";
  return out.str();
}

}  // namespace

struct ShardedCheckpointReader::Common {
  torch::serialize::InputArchive archive;
};

void save_sharded_checkpoint(Checkpointer& checkpointer, const Communicator& world, const ShardLayout& layout,
                             const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                             const TrainProgress& progress, const std::vector<torch::Tensor>& rank_rng) {
  const std::string directory = checkpointer.directory() + "/";
  std::string report;
  if (layout.writes) {
    try {
      checkpointer.ensure_directory();
      torch::serialize::OutputArchive archive;
      for (std::size_t k = 0; k < layout.ranges.size(); ++k) {
        const OwnedRange& range = layout.ranges[k];
        StateTensors state = read_state(optimizer, range.stepped);
        // Copies: an archive writes a view's whole storage (a flat unit), not the view.
        archive.write(range_key(k, "value"), range.value.reshape(-1).to(torch::kCPU).clone());
        archive.write(range_key(k, "step"), state.step.to(torch::kCPU));
        for (std::size_t s = 0; s < state.slots.size(); ++s)
          archive.write(range_key(k, "slot" + std::to_string(s)), state.slots[s].reshape(-1).to(torch::kCPU));
      }
      std::string data = archive_bytes(archive);
      write_file_atomically(directory + shard_file(progress.step, layout.shard, layout.shards), data);
      report = std::to_string(layout.shard) + " " + shard_report(layout, data);
    } catch (const std::exception& e) {
      report = std::string("error ") + e.what();
    }
  }
  // Every rank learns every writer's report, so all fail alike when one could not write.
  std::vector<std::string> reports(static_cast<std::size_t>(world.world_size));
  for (int r = 0; r < world.world_size; ++r) {
    reports[static_cast<std::size_t>(r)] = r == world.rank ? report : "";
    broadcast_bytes(world, reports[static_cast<std::size_t>(r)], r);
  }
  for (int r = 0; r < world.world_size; ++r)
    if (reports[static_cast<std::size_t>(r)].rfind("error ", 0) == 0)
      throw IoError("rank " + std::to_string(r) + ": " + reports[static_cast<std::size_t>(r)].substr(6));
  // Each writer prunes its own directory to the steps rank 0 kept: a node-local run.output_dir is
  // no other rank's to prune, and a shard left by a failed save (a full disk) goes with the rest.
  std::string kept;
  if (world.rank == 0) {
    // Each shard's report, from whichever rank wrote it (replica 0's, in any stage).
    std::vector<std::string> shard_reports(static_cast<std::size_t>(layout.shards));
    for (const auto& written : reports) {
      auto space = written.find(' ');
      if (written.empty() || space == std::string::npos) continue;
      auto shard = parse_int(written.substr(0, space));
      if (shard && *shard >= 0 && *shard < layout.shards)
        shard_reports[static_cast<std::size_t>(*shard)] = written.substr(space + 1);
    }

    torch::serialize::OutputArchive common;
    write_progress(common, progress, layout.data_parallel_size > 0 ? layout.data_parallel_size : world.world_size,
                   rank_rng);
    for (const auto& [name, buffer] : unique_buffers(model)) common.write("buffer/" + name, buffer.to(torch::kCPU));
    std::string common_data = archive_bytes(common);
    std::string common_file = checkpoint_stem(progress.step) + ".common.pt";
    write_file_atomically(directory + common_file, common_data);

    YAML::Emitter manifest;
    manifest << YAML::BeginMap;
    manifest << YAML::Key << "format_version" << YAML::Value << Checkpointer::kFormatVersion;
    manifest << YAML::Key << "step" << YAML::Value << progress.step;
    manifest << YAML::Key << "epoch" << YAML::Value << progress.epoch;
    manifest << YAML::Key << "world_size" << YAML::Value << world.world_size;
    manifest << YAML::Key << "mesh" << YAML::Value << YAML::DoubleQuoted << layout.mesh;
    manifest << YAML::Key << "optimizer" << YAML::Value << layout.optimizer;
    manifest << YAML::Key << "common" << YAML::Value << YAML::Flow << YAML::BeginMap;
    manifest << YAML::Key << "file" << YAML::Value << common_file << YAML::Key << "bytes" << YAML::Value
             << common_data.size() << YAML::Key << "crc32" << YAML::Value << crc32_of(common_data) << YAML::EndMap;
    manifest << YAML::Key << "parameters" << YAML::Value << YAML::BeginSeq;
    for (std::size_t i = 0; i < layout.parameters.size(); ++i) {
      manifest << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << layout.names[i];
      manifest << YAML::Key << "shape" << YAML::Value << YAML::Flow << layout.shapes[i]
               << YAML::EndMap;
    }
    manifest << YAML::EndSeq;
    manifest << YAML::Key << "shards" << YAML::Value << YAML::BeginSeq;
    for (int s = 0; s < layout.shards; ++s) {
      std::istringstream in(shard_reports[static_cast<std::size_t>(s)]);
      std::string ok;
      uint64_t bytes = 0;
      uint32_t crc = 0;
      in >> ok >> bytes >> crc;
      manifest << YAML::BeginMap << YAML::Key << "file" << YAML::Value << shard_file(progress.step, s, layout.shards);
      manifest << YAML::Key << "bytes" << YAML::Value << bytes << YAML::Key << "crc32" << YAML::Value << crc;
      manifest << YAML::Key << "ranges" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (int64_t parameter = 0, begin = 0, numel = 0; in >> parameter >> begin >> numel;)
        manifest << YAML::Flow << std::vector<int64_t>{parameter, begin, numel};
      manifest << YAML::EndSeq << YAML::EndMap;
    }
    manifest << YAML::EndSeq;
    checkpointer.write_run_identity(manifest);
    manifest << YAML::EndMap;
    checkpointer.commit(progress.step, std::string(manifest.c_str()) + "\n");

    for (const auto& committed : checkpointer.list()) kept += std::to_string(committed.step) + " ";
  }
  broadcast_bytes(world, kept, 0);
  if (layout.writes && world.rank != 0) {
    std::set<int64_t> steps;
    std::istringstream in(kept);
    for (int64_t step; in >> step;) steps.insert(step);
    checkpointer.remove_all_but(steps);
  }
}

bool is_sharded_manifest(const std::string& manifest) {
  try {
    return YAML::Load(manifest)["shards"].IsDefined();
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::string sharded_common_file(const std::string& manifest, const std::string& manifest_path) {
  try {
    return (fs::path(manifest_path).parent_path() / YAML::Load(manifest)["common"]["file"].as<std::string>()).string();
  } catch (const YAML::Exception&) {
    throw FileError(manifest_path + ": a sharded checkpoint manifest without its common file");
  }
}

ShardedCheckpointReader::ShardedCheckpointReader(const std::string& manifest, const std::string& manifest_path,
                                                 const std::string& common)
    : directory_(fs::path(manifest_path).parent_path().string()),
      manifest_path_(manifest_path),
      common_(std::make_unique<Common>()) {
  try {
    YAML::Node root = YAML::Load(manifest);
    mesh_ = root["mesh"].as<std::string>();
    optimizer_ = root["optimizer"].as<std::string>();
    for (const auto& p : root["parameters"]) {
      names_.push_back(p["name"].as<std::string>());
      shapes_.push_back(p["shape"].as<std::vector<int64_t>>());
    }
    for (const auto& s : root["shards"]) {
      Shard shard{s["file"].as<std::string>(), s["bytes"].as<uint64_t>(), s["crc32"].as<uint32_t>(), {}};
      for (const auto& r : s["ranges"]) {
        auto v = r.as<std::vector<int64_t>>();
        if (v.size() != 3 || v[0] < 0 || static_cast<std::size_t>(v[0]) >= names_.size() || v[1] < 0 || v[2] < 0)
          throw FileError(manifest_path + ": malformed run " + YAML::Dump(r) + " in " + shard.file);
        shard.ranges.push_back({static_cast<std::size_t>(v[0]), v[1], v[2]});
      }
      shards_.push_back(std::move(shard));
    }
  } catch (const YAML::Exception& e) {
    throw FileError(manifest_path + ": malformed sharded checkpoint manifest (" + e.msg + ")");
  }
  try {
    common_->archive.load_from(common.data(), common.size());
  } catch (const c10::Error&) {
    throw FileError(manifest_path + ": its common file is not a readable checkpoint");
  }
  progress_ = read_progress(common_->archive, manifest_path);
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

std::string ShardedCheckpointReader::describe() const {
  return std::to_string(shards_.size()) + " shards of " + mesh_;
}

void ShardedCheckpointReader::check_fits(const ShardLayout& layout, const torch::nn::Module& model) const {
  std::map<std::string, std::size_t> saved;
  for (std::size_t i = 0; i < names_.size(); ++i) saved[names_[i]] = i;
  if (optimizer_ != layout.optimizer)
    throw FileError(manifest_path_ + " holds the state of optim.name " + optimizer_ + ", and this run's is " +
                    layout.optimizer);
  std::string problems;
  for (std::size_t i = 0; i < layout.names.size(); ++i) {
    auto found = saved.find(layout.names[i]);
    if (found == saved.end()) {
      problems += " missing " + layout.names[i] + ";";
      continue;
    }
    const auto& shape = shapes_[found->second];
    if (shape != layout.shapes[i])
      problems += " " + layout.names[i] + " has shape " + c10::str(c10::IntArrayRef(shape)) + " in the checkpoint, " +
                  c10::str(c10::IntArrayRef(layout.shapes[i])) + " in the model;";
    saved.erase(found);
  }
  for (const auto& [name, index] : saved) problems += " unexpected " + name + ";";
  for (const auto& [name, buffer] : unique_buffers(model)) {
    torch::Tensor value;
    if (!common_->archive.try_read("buffer/" + name, value))
      problems += " missing buffer " + name + ";";
    else if (value.sizes() != buffer.sizes())
      problems += " buffer " + name + " has shape " + c10::str(value.sizes()) + " in the checkpoint, " +
                  c10::str(buffer.sizes()) + " in the model;";
  }
  if (!problems.empty())
    throw FileError(manifest_path_ + " does not fit this model (was it written with another model config?):" +
                    problems);
}

std::string ShardedCheckpointReader::read_shards(const ShardLayout& layout) {
  std::map<std::string, std::size_t> saved;
  for (std::size_t i = 0; i < names_.size(); ++i) saved[names_[i]] = i;
  // Every element this rank keeps must be in exactly one run: a manifest cut short or edited says
  // so here, where the ranks still agree on going back to the previous checkpoint, not in restore().
  for (const OwnedRange& mine : layout.ranges) {
    const std::size_t parameter = saved.at(layout.names[mine.parameter]);
    const int64_t begin = mine.begin, end = mine.begin + mine.value.numel();
    int64_t covered = 0;
    for (const auto& shard : shards_)
      for (const auto& theirs : shard.ranges)
        if (theirs.parameter == parameter)
          covered += std::max<int64_t>(0, std::min(end, theirs.begin + theirs.numel) - std::max(begin, theirs.begin));
    if (covered != end - begin)
      return manifest_path_ + ": its shards' runs hold " + std::to_string(covered) + " of elements [" +
             std::to_string(begin) + ", " + std::to_string(end) + ") of " + layout.names[mine.parameter] +
             " (the manifest was cut short or edited)";
  }
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    bool needed = false;
    for (const auto& theirs : shards_[s].ranges)
      for (const auto& mine : layout.ranges)
        needed |= saved.at(layout.names[mine.parameter]) == theirs.parameter && theirs.numel > 0 &&
                  mine.begin < theirs.begin + theirs.numel && theirs.begin < mine.begin + mine.value.numel();
    if (!needed || read_.count(s)) continue;
    std::string path = directory_ + "/" + shards_[s].file, data;
    if (auto problem = verify_file(path, shards_[s].bytes, shards_[s].crc32, &data); !problem.empty()) return problem;
    auto archive = std::make_unique<torch::serialize::InputArchive>();
    try {
      archive->load_from(data.data(), data.size());
    } catch (const c10::Error&) {
      return path + ": not a readable checkpoint shard";
    }
    read_[s] = std::move(archive);
  }
  return "";
}

void ShardedCheckpointReader::restore(const ShardLayout& layout, torch::nn::Module& model,
                                      torch::optim::Optimizer& optimizer, int rank) {
  torch::NoGradGuard no_grad;
  std::map<std::string, std::size_t> saved;
  for (std::size_t i = 0; i < names_.size(); ++i) saved[names_[i]] = i;
  const std::size_t slots = static_cast<std::size_t>(slots_of(optimizer));
  for (const OwnedRange& mine : layout.ranges) {
    const std::size_t parameter = saved.at(layout.names[mine.parameter]);
    const int64_t begin = mine.begin, end = mine.begin + mine.value.numel();
    StateTensors state;
    int64_t step = -1, covered = 0;
    torch::Tensor value = torch::empty({end - begin}, mine.value.options());
    for (std::size_t s = 0; s < slots; ++s) state.slots.push_back(torch::zeros({end - begin}, mine.value.options()));
    for (const auto& [s, archive] : read_) {
      const auto& theirs = shards_[s].ranges;
      for (std::size_t k = 0; k < theirs.size(); ++k) {
        const int64_t lo = std::max(begin, theirs[k].begin), hi = std::min(end, theirs[k].begin + theirs[k].numel);
        if (theirs[k].parameter != parameter || lo >= hi) continue;
        auto read = [&, s = s](const std::string& what) {
          torch::Tensor t;
          if (!archive->try_read(range_key(k, what), t) || (what != "step" && t.numel() != theirs[k].numel))
            throw FileError(directory_ + "/" + shards_[s].file + ": no " + range_key(k, what) + " as its manifest says");
          return what == "step" ? t : t.narrow(0, lo - theirs[k].begin, hi - lo);
        };
        value.narrow(0, lo - begin, hi - lo).copy_(read("value"));
        step = std::max(step, read("step").item<int64_t>());
        for (std::size_t slot = 0; slot < slots; ++slot)
          state.slots[slot].narrow(0, lo - begin, hi - lo).copy_(read("slot" + std::to_string(slot)));
        covered += hi - lo;
      }
    }
    if (covered != end - begin)
      throw FileError(manifest_path_ + ": its shards hold " + std::to_string(covered) + " of elements [" +
                      std::to_string(begin) + ", " + std::to_string(end) + ") of " + layout.names[mine.parameter]);
    mine.value.copy_(value.view(mine.value.sizes()));  // logical order, whatever its layout
    state.step = torch::full({1}, step, torch::kLong);
    for (auto& slot : state.slots) slot = slot.view(mine.stepped.sizes());
    write_state(optimizer, mine.stepped, state);
  }
  for (const auto& [name, buffer] : unique_buffers(model)) {
    torch::Tensor value;
    common_->archive.read("buffer/" + name, value);
    buffer.copy_(value);
  }
  restore_rng(common_->archive, rank);
  read_.clear();
}

}  // namespace ddp
