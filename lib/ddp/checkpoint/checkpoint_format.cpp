#include "ddp/checkpoint/checkpoint_format.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "ddp/comm/collectives.h"
#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/parallel/table_updates.h"

namespace ddp {

// Note [Checkpoint format]
// A checkpoint of step N is, in the checkpoint directory (format 2):
//   step_N.shard-S-of-K.pt  one per shard of the layout (a pipeline stage's data shard), written by
//                           its rank of data replica 0: for each piece of a parameter it keeps, the
//                           values and the optimizer state (step count and moments), box-shaped;
//   step_N.common.pt        rank 0's: the progress, the buffers, every rank's generator state;
//   step_N.json             the manifest, written last by rank 0 once every shard is on disk: world
//                           size and mesh, the optimizer, each parameter's name and whole shape,
//                           each file's size and CRC-32, and for each shard its pieces as
//                           [parameter, offsets, sizes]: the box of the whole tensor it holds.
// A whole checkpoint (checkpoint.format whole, or auto where the plan splits no state) is the
// one-file case, step_N.pt, which holds the common state too: every writer sends its pieces to
// rank 0, which writes the file, reads it on resume and sends its bytes to every rank, so no other
// rank needs it (Note [Resume from rank 0]).
// The boxes say where every element is, whatever layout wrote them (a ZeRO flat shard's run of
// elements is the few boxes that tile it, tensor parallelism's row or column block one box), so a
// resume at any layout (another world size, dist.shard, pipeline split, none) reads the files whose
// pieces overlap its own and copies the overlaps: resharding is box intersection. A rank reads only
// what it keeps: at the same layout its own shard; replicated, all of them. Every rank checks the
// CRC-32 of what it reads, and the ranks agree before any restores, so a damaged shard seen by one
// rank sends all of them to the previous checkpoint (checkpoint.resume: auto) or fails all of them
// with that rank's message. The checkpoint directory must be readable where the shards are needed:
// shared storage, or one node; checkpoint.format whole is the choice otherwise.
// Format 1 is still read: its sharded checkpoints held 1-D runs [parameter, first element, count]
// (read as the boxes that tile them), its whole ones the model by name and LibTorch's optimizer
// archive (read through an optimizer like this run's over whole tensors).

namespace {

namespace fs = std::filesystem;

// The prefix of a piece's tensors' keys in its file: "p3/" (format 1's runs: "r3/").
std::string piece_key(const char* kind, std::size_t k) { return fmt::format("{}{}/", kind, k); }

std::string shard_file(int64_t step, int shard, int shards) {
  return checkpoint_stem(step) + ".shard-" + std::to_string(shard) + "-of-" + std::to_string(shards) + ".pt";
}

// A file's size and CRC-32, as a manifest records them.
struct FileSummary {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

FileSummary summary_of(std::string_view data) { return {data.size(), crc32_of(data)}; }

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

// Note [Streamed checkpoint files]
// A file that its writer alone needs goes from the archive to the disk as the archive serialises
// it, never whole in memory, and a piece that is all of its tensor's storage goes into the archive
// as it is, not copied (on a GPU, its host copy): rank 0 of a replicated run with 192 MiB of state
// peaked 1,040 MiB above the other ranks when the archive's bytes were a string, then merged, and
// about 110 MiB after. That the pieces are the live tensors holds because the save is synchronous,
// between steps. Only a whole checkpoint whose pieces come from several writers travels as bytes,
// to rank 0.
FileSummary save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  FileSummary summary;
  write_file_atomically(path, [&](const ByteSink& sink) {
    // LibTorch's archive writer aborts the process on a failed write (an exception, or a short
    // write, reaches its destructor, which writes again): after the sink's first error the rest of
    // the bytes are dropped as if written, and the error is thrown once the archive is done.
    std::exception_ptr failure;
    archive.save_to([&](const void* data, std::size_t size) -> std::size_t {
      if (failure) return size;
      try {
        sink(static_cast<const char*>(data), size);
      } catch (...) {
        failure = std::current_exception();
        return size;
      }
      summary.crc = crc32_of({static_cast<const char*>(data), size}, summary.crc);
      summary.bytes += size;
      return size;
    });
    if (failure) std::rethrow_exception(failure);
  });
  return summary;
}

// Model buffers, each tensor once, by name (the checkpoint's common file holds them).
std::vector<std::pair<std::string, torch::Tensor>> unique_buffers(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> buffers;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : model.named_buffers())
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) buffers.emplace_back(item.key(), item.value());
  return buffers;
}

// What the manifest says of a shard's piece: "parameter ndim offsets... sizes...".
struct PieceEntry {
  std::size_t parameter;
  TensorBox box;
};

// A layout's file: each range's boxes (values, step, slots) into `archive`, and `entries` with the
// pieces, in key order.
void write_pieces(torch::serialize::OutputArchive& archive, const CheckpointLayout& layout,
                  const torch::optim::Optimizer& optimizer, std::vector<PieceEntry>& entries) {
  torch::NoGradGuard no_grad;
  for (std::size_t r = layout.first_written; r < layout.ranges.size(); ++r) {
    const OwnedRange& range = layout.ranges[r];
    StateTensors state = read_state(optimizer, range.stepped);
    torch::Tensor value = range.value.reshape(-1);
    for (const RunBox& piece : boxes_of(range, layout.shapes[range.parameter])) {
      const std::string key = piece_key("p", entries.size());
      // An archive writes a view's whole storage (a flat unit), not the view: a piece that is not
      // all of its storage is copied.
      auto cut = [&](const torch::Tensor& flat) {
        torch::Tensor t = flat.reshape(-1).narrow(0, piece.first, piece.box.numel()).reshape(piece.box.sizes).to(torch::kCPU);
        const bool whole = t.is_contiguous() && t.storage_offset() == 0 &&
                           t.storage().nbytes() == static_cast<std::size_t>(t.numel()) * t.element_size();
        return whole ? t : t.clone();
      };
      archive.write(key + "value", cut(value));
      archive.write(key + "step", state.step.to(torch::kCPU));
      // No state yet (or a tensor the optimizer does not step: sharded tables' rows): no slots.
      if (state.step.item<int64_t>() >= 0)
        for (std::size_t s = 0; s < state.slots.size(); ++s) archive.write(key + "slot" + std::to_string(s), cut(state.slots[s]));
      entries.push_back({range.parameter, piece.box});
    }
  }
}

// What goes into the common file (or the whole checkpoint's one file).
void write_common(torch::serialize::OutputArchive& archive, const torch::nn::Module& model,
                  const TrainProgress& progress, int data_parallel_size, const std::vector<torch::Tensor>& rank_rng) {
  write_progress(archive, progress, data_parallel_size, rank_rng);
  for (const auto& [name, buffer] : unique_buffers(model)) archive.write("buffer/" + name, buffer.to(torch::kCPU));
}

// What every writer tells the others: "ok BYTES CRC" and its pieces, or the error.
std::string shard_report(const FileSummary& file, const std::vector<PieceEntry>& entries) {
  std::ostringstream out;
  out << "ok " << file.bytes << " " << file.crc << "\n";
  for (const auto& entry : entries) {
    out << entry.parameter << " " << entry.box.sizes.size();
    for (int64_t v : entry.box.offsets) out << " " << v;
    for (int64_t v : entry.box.sizes) out << " " << v;
    out << "\n";
  }
  return out.str();
}

// The manifest of step `progress.step`; `reports[s]` is shard s's shard_report.
std::string manifest_text(const Checkpointer& checkpointer, const CheckpointLayout& layout,
                          const torch::optim::Optimizer& optimizer, const TrainProgress& progress, int world_size,
                          const std::string& common_file, const FileSummary& common,
                          const std::vector<std::string>& reports) {
  YAML::Emitter manifest;
  manifest << YAML::BeginMap;
  manifest << YAML::Key << "format_version" << YAML::Value << Checkpointer::kFormatVersion;
  manifest << YAML::Key << "step" << YAML::Value << progress.step;
  manifest << YAML::Key << "epoch" << YAML::Value << progress.epoch;
  manifest << YAML::Key << "world_size" << YAML::Value << world_size;
  manifest << YAML::Key << "mesh" << YAML::Value << YAML::DoubleQuoted << layout.mesh;
  manifest << YAML::Key << "optimizer" << YAML::Value << optimizer_name(optimizer);
  manifest << YAML::Key << "common" << YAML::Value << YAML::Flow << YAML::BeginMap;
  manifest << YAML::Key << "file" << YAML::Value << common_file << YAML::Key << "bytes" << YAML::Value
           << common.bytes << YAML::Key << "crc32" << YAML::Value << common.crc << YAML::EndMap;
  manifest << YAML::Key << "parameters" << YAML::Value << YAML::BeginSeq;
  for (std::size_t i = 0; i < layout.parameters.size(); ++i) {
    manifest << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << layout.names[i];
    manifest << YAML::Key << "shape" << YAML::Value << YAML::Flow << layout.shapes[i] << YAML::EndMap;
  }
  manifest << YAML::EndSeq;
  manifest << YAML::Key << "shards" << YAML::Value << YAML::BeginSeq;
  for (int s = 0; s < layout.shards; ++s) {
    std::istringstream in(reports[static_cast<std::size_t>(s)]);
    std::string ok;
    uint64_t bytes = 0;
    uint32_t crc = 0;
    in >> ok >> bytes >> crc;
    manifest << YAML::BeginMap << YAML::Key << "file" << YAML::Value
             << (layout.single_file ? common_file : shard_file(progress.step, s, layout.shards));
    manifest << YAML::Key << "bytes" << YAML::Value << bytes << YAML::Key << "crc32" << YAML::Value << crc;
    manifest << YAML::Key << "pieces" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (std::size_t parameter = 0, dims = 0; in >> parameter >> dims;) {
      std::vector<int64_t> offsets(dims), sizes(dims);
      for (auto& v : offsets) in >> v;
      for (auto& v : sizes) in >> v;
      manifest << YAML::Flow << YAML::BeginSeq << parameter << YAML::Flow << offsets << YAML::Flow << sizes
               << YAML::EndSeq;
    }
    manifest << YAML::EndSeq << YAML::EndMap;
  }
  manifest << YAML::EndSeq;
  checkpointer.write_run_identity(manifest);
  manifest << YAML::EndMap;
  return std::string(manifest.c_str()) + "\n";
}

// One file from every shard's pieces: shard s's report `reports[s]` ("ok BYTES CRC" and its
// pieces) and bytes `data[s]`, renumbered in shard order into `archive`, their entries in `merged`.
void merge_pieces(const std::vector<std::string>& reports, const std::vector<std::string>& data, int slots,
                  torch::serialize::OutputArchive& archive, std::vector<PieceEntry>& merged) {
  for (std::size_t s = 0; s < reports.size(); ++s) {
    torch::serialize::InputArchive shard;
    shard.load_from(data[s].data(), data[s].size());
    std::istringstream in(reports[s]);
    std::string ok;
    uint64_t bytes = 0;
    uint32_t crc = 0;
    in >> ok >> bytes >> crc;
    for (std::size_t k = 0, parameter = 0, dims = 0; in >> parameter >> dims; ++k) {
      PieceEntry entry{parameter, {std::vector<int64_t>(dims), std::vector<int64_t>(dims)}};
      for (auto& v : entry.box.offsets) in >> v;
      for (auto& v : entry.box.sizes) in >> v;
      const std::string from = piece_key("p", k), to = piece_key("p", merged.size());
      std::vector<std::string> what{"value", "step"};
      for (int slot = 0; slot < slots; ++slot) what.push_back("slot" + std::to_string(slot));
      for (const auto& w : what) {
        torch::Tensor t;
        if (w == "value" || w == "step")
          shard.read(from + w, t);
        else if (!shard.try_read(from + w, t))
          continue;  // a piece without optimizer state has no slots
        archive.write(to + w, t);
      }
      merged.push_back(std::move(entry));
    }
  }
}

}  // namespace

struct CheckpointReader::Common {
  std::shared_ptr<torch::serialize::InputArchive> archive = std::make_shared<torch::serialize::InputArchive>();
};

CheckpointLayout whole_layout(const torch::nn::Module& model) {
  CheckpointLayout layout;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    layout.ranges.push_back({layout.parameters.size(), 0, p.detach(), p, {}});
    layout.names.push_back(item.key());
    layout.parameters.push_back(p);
    layout.shapes.push_back(p.sizes().vec());
  }
  layout.writes = true;
  layout.single_file = true;
  layout.mesh = "whole";
  return layout;
}

void save_whole_checkpoint(Checkpointer& checkpointer, const torch::nn::Module& model,
                           const torch::optim::Optimizer& optimizer, const TrainProgress& progress, int world_size,
                           const std::vector<torch::Tensor>& rank_rng) {
  CheckpointLayout layout = whole_layout(model);
  checkpointer.ensure_directory();
  std::vector<PieceEntry> entries;
  torch::serialize::OutputArchive archive;
  write_pieces(archive, layout, optimizer, entries);
  write_common(archive, model, progress, world_size, rank_rng);
  const std::string file = checkpoint_stem(progress.step) + ".pt";
  FileSummary written = save_archive(archive, checkpointer.directory() + "/" + file);
  checkpointer.commit(progress.step, manifest_text(checkpointer, layout, optimizer, progress, world_size, file, written,
                                                   {shard_report(written, entries)}));
}

void write_checkpoint(Checkpointer& checkpointer, const Communicator& world, const CheckpointLayout& layout,
                      const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                      const TrainProgress& progress, const std::vector<torch::Tensor>& rank_rng) {
  const std::string directory = checkpointer.directory() + "/";
  const int data_parallel_size = layout.data_parallel_size > 0 ? layout.data_parallel_size : world.world_size;
  std::string report, data;
  // One file of one writer's pieces: rank 0 (the writer then) writes it whole, the common state
  // with its pieces, straight from the archive (Note [Streamed checkpoint files]).
  const bool alone = layout.single_file && layout.shards == 1;
  const std::string one_file = checkpoint_stem(progress.step) + ".pt";
  FileSummary written_alone;
  if (layout.writes) {
    try {
      checkpointer.ensure_directory();
      std::vector<PieceEntry> entries;
      torch::serialize::OutputArchive archive;
      write_pieces(archive, layout, optimizer, entries);
      FileSummary file;
      if (alone) {
        write_common(archive, model, progress, data_parallel_size, rank_rng);
        file = written_alone = save_archive(archive, directory + one_file);
      } else if (layout.single_file) {
        data = archive_bytes(archive);  // to rank 0, which merges every writer's pieces into the file
        file = summary_of(data);
      } else {
        file = save_archive(archive, directory + shard_file(progress.step, layout.shard, layout.shards));
      }
      report = std::to_string(layout.shard) + " " + shard_report(file, entries);
    } catch (const std::exception& e) {
      report = "error " + error_report(e);
    }
  }
  // Every rank learns every writer's report, so all fail alike when one could not write.
  std::vector<std::string> reports(static_cast<std::size_t>(world.world_size));
  for (int r = 0; r < world.world_size; ++r) {
    reports[static_cast<std::size_t>(r)] = r == world.rank ? report : "";
    broadcast_bytes(world, reports[static_cast<std::size_t>(r)], r);
  }
  for (int r = 0; r < world.world_size; ++r)
    if (reports[static_cast<std::size_t>(r)].rfind("error ", 0) == 0) {
      // No manifest will commit this step: a shard this rank wrote for it would stay, unreferenced,
      // on the disk that just filled, until a later save succeeded. Unless the step is committed
      // already (saved again, as a stop in its resumed evaluation does): the shard is that one's.
      std::error_code ignored;
      if (layout.writes && !layout.single_file &&
          !fs::exists(directory + checkpoint_stem(progress.step) + ".json", ignored))
        fs::remove(directory + shard_file(progress.step, layout.shard, layout.shards), ignored);
      throw_reported(reports[static_cast<std::size_t>(r)].substr(6),
                     r == world.rank ? "" : "rank " + std::to_string(r) + ": ");  // this rank's own: it says so
    }
  // Each shard's report and (one file) its pieces' bytes, from whichever rank wrote it (replica 0's, in any stage).
  std::vector<std::string> shard_reports(static_cast<std::size_t>(layout.shards)), shard_data_of(shard_reports.size());
  for (int r = 0; r < world.world_size; ++r) {
    const std::string& written = reports[static_cast<std::size_t>(r)];
    auto space = written.find(' ');
    auto shard = space == std::string::npos ? std::nullopt : parse_int(written.substr(0, space));
    if (!shard || *shard < 0 || *shard >= layout.shards) continue;
    shard_reports[static_cast<std::size_t>(*shard)] = written.substr(space + 1);
    if (!layout.single_file) continue;
    std::string bytes = r == world.rank ? std::move(data) : "";
    if (r != 0) broadcast_bytes(world, bytes, r);  // one file: the pieces go to rank 0, which writes it
    if (world.rank == 0) shard_data_of[static_cast<std::size_t>(*shard)] = std::move(bytes);
  }
  // Each writer prunes its own directory to the steps rank 0 kept: a node-local run.output_dir is
  // no other rank's to prune, and a shard left by a failed save (a full disk) goes with the rest.
  std::string kept;
  std::exception_ptr failed;  // rank 0's own, rethrown as it is once the others know
  if (world.rank == 0) {
    try {
      std::string common_name = layout.single_file ? one_file : checkpoint_stem(progress.step) + ".common.pt";
      FileSummary common_file = written_alone;
      if (!alone) {
        torch::serialize::OutputArchive common;
        std::vector<PieceEntry> merged;
        if (layout.single_file) merge_pieces(shard_reports, shard_data_of, slots_of(optimizer), common, merged);
        shard_data_of.clear();
        write_common(common, model, progress, data_parallel_size, rank_rng);
        common_file = save_archive(common, directory + common_name);
        if (layout.single_file) shard_reports = {shard_report(common_file, merged)};
      }
      CheckpointLayout written = layout;
      if (layout.single_file) written.shards = 1;
      checkpointer.commit(progress.step, manifest_text(checkpointer, written, optimizer, progress, world.world_size,
                                                       common_name, common_file, shard_reports));
      for (const auto& committed : checkpointer.list()) kept += std::to_string(committed.step) + " ";
    } catch (const std::exception& e) {
      failed = std::current_exception();
      kept = "error " + error_report(e);
    }
  }
  // The others wait here for what rank 0 kept: a failure of its own (a full disk for the common
  // file) reaches them with its cause, where rank 0 leaving would say only that it left.
  broadcast_bytes(world, kept, 0);
  if (failed) std::rethrow_exception(failed);
  if (kept.rfind("error ", 0) == 0) throw_reported(kept.substr(6), "rank 0: ");
  if (layout.writes && !layout.single_file && world.rank != 0) {
    std::set<int64_t> steps;
    std::istringstream in(kept);
    for (int64_t step; in >> step;) steps.insert(step);
    checkpointer.remove_all_but(steps);
  }
}

namespace {

// An optimizer of `like`'s kind and default options over `parameters`.
std::unique_ptr<torch::optim::Optimizer> optimizer_like(const torch::optim::Optimizer& like,
                                                        const std::vector<torch::Tensor>& parameters) {
  const std::string name = optimizer_name(like);
  if (name == "sgd")
    return std::make_unique<torch::optim::SGD>(parameters, static_cast<const torch::optim::SGDOptions&>(like.defaults()));
  if (name == "adamw")
    return std::make_unique<torch::optim::AdamW>(parameters,
                                                 static_cast<const torch::optim::AdamWOptions&>(like.defaults()));
  return std::make_unique<torch::optim::Adam>(parameters, static_cast<const torch::optim::AdamOptions&>(like.defaults()));
}

}  // namespace

TrainProgress load_whole_checkpoint(const std::string& manifest, const std::string& manifest_path,
                                    const std::string& data, torch::nn::Module& model,
                                    torch::optim::Optimizer& optimizer, int rank,
                                    const std::function<void(const TrainProgress&)>& accept) {
  CheckpointReader reader(manifest, manifest_path, data);
  if (accept) accept(reader.progress());
  CheckpointLayout layout = whole_layout(model);
  layout.skips_row_state = true;  // tables' row state: an optimizer over every parameter has none of it
  layout.whole_optimizer = [&optimizer](const std::vector<torch::Tensor>& parameters) {
    return optimizer_like(optimizer, parameters);
  };
  reader.check_fits(layout, model, optimizer);
  if (auto problem = reader.read_pieces(layout); !problem.empty()) throw FileError(problem);
  reader.restore(layout, model, optimizer, rank);
  return reader.progress();
}

std::string common_file(const std::string& manifest, const std::string& manifest_path) {
  try {
    YAML::Node root = YAML::Load(manifest);
    if (root.IsMap() && root["common"])
      return (fs::path(manifest_path).parent_path() / root["common"]["file"].as<std::string>()).string();
  } catch (const YAML::Exception&) {
    throw FileError(manifest_path + ": a malformed checkpoint manifest");
  }
  return checkpoint_at(manifest_path).data_path;  // format 1's whole checkpoint
}

CheckpointReader::CheckpointReader(const std::string& manifest, const std::string& manifest_path,
                                                 const std::string& common)
    : directory_(fs::path(manifest_path).parent_path().string()),
      manifest_path_(manifest_path),
      common_(std::make_unique<Common>()) {
  const std::string common_path = common_file(manifest, manifest_path);
  common_name_ = fs::path(common_path).filename().string();
  try {
    common_->archive->load_from(common.data(), common.size());
  } catch (const c10::Error&) {
    throw FileError(common_path + ": not a readable checkpoint");
  }
  progress_ = read_progress(*common_->archive, common_path);
  try {
    YAML::Node root = YAML::Load(manifest);
    // The manifest's step orders the checkpoints (the newest is resumed): it must be the step its
    // data holds, or an edited or mismatched manifest would pass for another checkpoint.
    if (root.IsMap() && root["step"] && root["step"].as<int64_t>() != progress_.step)
      throw FileError(manifest_path + " says step " + root["step"].as<std::string>() + ", but " + common_path +
                      " holds step " + std::to_string(progress_.step) +
                      ": the manifest was edited, or is another checkpoint's");
    format_ = root.IsMap() && root["format_version"] ? root["format_version"].as<int>() : 1;
    if (!root.IsMap() || !root["shards"]) {  // format 1's whole checkpoint: adopt_whole_file() reads it
      mesh_ = "one whole file";
      buffer_prefix_ = "model/";
      whole_format_1_ = true;
      shards_.push_back({common_name_, 0, 0});
      return;
    }
    mesh_ = root["mesh"].as<std::string>();
    optimizer_ = root["optimizer"].as<std::string>();
    for (const auto& p : root["parameters"]) {
      names_.push_back(p["name"].as<std::string>());
      shapes_.push_back(p["shape"].as<std::vector<int64_t>>());
    }
    for (const auto& s : root["shards"]) {
      const std::size_t shard = shards_.size();
      shards_.push_back({s["file"].as<std::string>(), s["bytes"].as<uint64_t>(), s["crc32"].as<uint32_t>()});
      auto malformed = [&](const YAML::Node& entry) {
        return FileError(manifest_path + ": malformed piece " + YAML::Dump(entry) + " of " + shards_.back().file);
      };
      std::size_t k = 0;
      for (const auto& entry : s[format_ >= 2 ? "pieces" : "ranges"]) {
        if (!entry.IsSequence() || entry.size() != 3) throw malformed(entry);
        const auto parameter = entry[0].as<int64_t>();
        if (parameter < 0 || static_cast<std::size_t>(parameter) >= names_.size()) throw malformed(entry);
        const auto& shape = shapes_[static_cast<std::size_t>(parameter)];
        if (format_ >= 2) {
          TensorBox box{entry[1].as<std::vector<int64_t>>(), entry[2].as<std::vector<int64_t>>()};
          bool inside = box.offsets.size() == shape.size() && box.sizes.size() == shape.size();
          for (std::size_t d = 0; inside && d < shape.size(); ++d)
            inside = box.offsets[d] >= 0 && box.sizes[d] > 0 && box.offsets[d] + box.sizes[d] <= shape[d];
          if (!inside) throw malformed(entry);
          pieces_.push_back({static_cast<std::size_t>(parameter), std::move(box), shard, piece_key("p", k++)});
          continue;
        }
        // Format 1: a run [parameter, first element, count] of the flattened parameter.
        const auto begin = entry[1].as<int64_t>(), numel = entry[2].as<int64_t>();
        int64_t elements = 1;
        for (int64_t size : shape) elements *= size;
        if (begin < 0 || numel < 0 || begin + numel > elements) throw malformed(entry);
        const std::string key = piece_key("r", k++);
        for (RunBox& piece : boxes_of_run(shape, begin, numel))
          pieces_.push_back({static_cast<std::size_t>(parameter), std::move(piece.box), shard, key, piece.first});
      }
    }
  } catch (const YAML::Exception& e) {
    throw FileError(manifest_path + ": malformed checkpoint manifest (" + e.msg + ")");
  }
  for (std::size_t i = 0; i < pieces_.size(); ++i) by_parameter_[pieces_[i].parameter].push_back(i);
  // A parameter's pieces tile it: two that overlap count an element twice, which hides one that no
  // piece holds (a digit of a box edited), and restore() would count it covered and leave it unset.
  for (const auto& [parameter, pieces] : by_parameter_)
    for (std::size_t a = 0; a < pieces.size(); ++a)
      for (std::size_t b = a + 1; b < pieces.size(); ++b)
        if (box_overlap(pieces_[pieces[a]].box, pieces_[pieces[b]].box))
          throw FileError(manifest_path + ": pieces " + pieces_[pieces[a]].box.describe() + " and " +
                          pieces_[pieces[b]].box.describe() + " of " + names_[parameter] +
                          " overlap (the manifest was cut short or edited)");
}

CheckpointReader::~CheckpointReader() = default;

std::string CheckpointReader::describe() const {
  if (single_file()) return "whole";
  return std::to_string(shards_.size()) + " shards of " + mesh_;
}

std::string CheckpointReader::source() const {
  return single_file() ? directory_ + "/" + common_name_ : manifest_path_;
}

const std::vector<std::size_t>& CheckpointReader::pieces_of(std::size_t parameter) const {
  static const std::vector<std::size_t> none;
  auto found = by_parameter_.find(parameter);
  return found == by_parameter_.end() ? none : found->second;
}

void CheckpointReader::adopt_whole_file(const CheckpointLayout& layout) {
  torch::NoGradGuard no_grad;
  const std::string path = source();
  torch::serialize::InputArchive& archive = *common_->archive;
  std::vector<torch::Tensor> values;
  for (std::size_t i = 0; i < layout.names.size(); ++i) {
    torch::Tensor value;
    if (!archive.try_read("model/" + layout.names[i], value)) continue;  // check_fits names it
    names_.push_back(layout.names[i]);
    shapes_.push_back(value.sizes().vec());
    values.push_back(value);
  }
  for (std::size_t i = 0; i < names_.size(); ++i) {
    pieces_.push_back({i, whole_box(shapes_[i]), 0, piece_key("p", i)});
    by_parameter_[i].push_back(i);
    adopted_[pieces_.back().key + "value"] = values[i];
  }
  // The optimizer's state, through an optimizer like this run's over whole tensors of the same shapes.
  if (names_.size() != layout.names.size() || shapes_ != layout.shapes) return;  // check_fits says why
  if (!layout.whole_optimizer)
    throw FileError(path + " is a whole checkpoint of format 1, whose optimizer state this reader cannot take");
  std::vector<torch::Tensor> whole;
  for (const auto& shape : shapes_) whole.push_back(torch::zeros(shape));
  auto optimizer = layout.whole_optimizer(whole);
  torch::serialize::InputArchive state;
  if (!archive.try_read("optimizer", state)) throw FileError(path + ": no optimizer state");
  try {
    optimizer->load(state);
  } catch (const c10::Error&) {
    throw FileError(path + ": its optimizer state does not fit optim.name and the model of this run");
  }
  optimizer_ = optimizer_name(*optimizer);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    StateTensors tensors = read_state(*optimizer, whole[i]);
    const std::string key = piece_key("p", i);
    adopted_[key + "step"] = tensors.step;
    for (std::size_t s = 0; s < tensors.slots.size(); ++s) adopted_[key + "slot" + std::to_string(s)] = tensors.slots[s];
  }
}

void CheckpointReader::check_fits(const CheckpointLayout& layout, const torch::nn::Module& model,
                                         const torch::optim::Optimizer& optimizer) {
  if (whole_format_1_ && pieces_.empty()) adopt_whole_file(layout);
  std::map<std::string, std::size_t> saved;
  for (std::size_t i = 0; i < names_.size(); ++i) saved[names_[i]] = i;
  if (!optimizer_.empty() && optimizer_ != optimizer_name(optimizer))
    throw FileError(source() + " holds the state of optim.name " + optimizer_ + ", and this run's is " +
                    optimizer_name(optimizer));
  std::string problems;
  // Tables updated row by row in one run and not the other: optim.embeddings' doing, said as such.
  bool row_state_missing = false, row_state_unexpected = false;
  for (std::size_t i = 0; i < layout.names.size(); ++i) {
    auto found = saved.find(layout.names[i]);
    if (found == saved.end()) {
      problems += " missing " + layout.names[i] + ";";
      row_state_missing = row_state_missing || layout.names[i].ends_with(kRowStateSuffix);
      continue;
    }
    const auto& shape = shapes_[found->second];
    if (shape != layout.shapes[i])
      problems += " " + layout.names[i] + " has shape " + c10::str(c10::IntArrayRef(shape)) + " in the checkpoint, " +
                  c10::str(c10::IntArrayRef(layout.shapes[i])) + " in the model;";
    saved.erase(found);
  }
  for (const auto& [name, index] : saved) {
    if (!name.ends_with(kRowStateSuffix)) {
      problems += " unexpected " + name + ";";
    } else if (!layout.skips_row_state) {
      problems += " unexpected " + name + ";";
      row_state_unexpected = true;
    }
  }
  if (row_state_missing != row_state_unexpected)
    throw FileError(source() + " does not fit this run: its embedding tables were updated " +
                    (row_state_unexpected ? "row by row, and this run's by optim.name" : "by optim.name, and this run's row by row") +
                    " (optim.embeddings auto means dense under model.embedding_sharding replicate and rowwise_adagrad "
                    "under table or row): set optim.embeddings as the run that wrote it had it");
  for (const auto& [name, buffer] : unique_buffers(model)) {
    torch::Tensor value;
    if (!common_->archive->try_read(buffer_prefix_ + name, value))
      problems += " missing buffer " + name + ";";
    else if (value.sizes() != buffer.sizes())
      problems += " buffer " + name + " has shape " + c10::str(value.sizes()) + " in the checkpoint, " +
                  c10::str(buffer.sizes()) + " in the model;";
  }
  if (!problems.empty())
    throw FileError(source() + " does not fit this model (was it written with another model config?):" + problems);
}

std::string CheckpointReader::read_pieces(const CheckpointLayout& layout) {
  std::map<std::string, std::size_t> saved;
  for (std::size_t i = 0; i < names_.size(); ++i) saved[names_[i]] = i;
  // Every element this rank keeps must be in exactly one piece: a manifest cut short or edited
  // says so here, where the ranks still agree on going back to the previous checkpoint, not in restore().
  std::set<std::size_t> needed;
  for (const OwnedRange& mine : layout.ranges) {
    const std::size_t parameter = saved.at(layout.names[mine.parameter]);
    int64_t covered = 0;
    for (const RunBox& target : boxes_of(mine, layout.shapes[mine.parameter]))
      for (std::size_t k : pieces_of(parameter))
        if (auto overlap = box_overlap(target.box, pieces_[k].box)) {
          covered += overlap->numel();
          needed.insert(pieces_[k].shard);
        }
    if (covered != mine.value.numel())
      return manifest_path_ + ": its pieces hold " + std::to_string(covered) + " of elements [" +
             std::to_string(mine.begin) + ", " + std::to_string(mine.begin + mine.value.numel()) + ") of " +
             layout.names[mine.parameter] + " (the manifest was cut short or edited)";
  }
  for (std::size_t s : needed) {
    if (read_.count(s)) continue;
    if (shards_[s].file == common_name_) {  // the whole checkpoint's one file: here already
      read_[s] = common_->archive;
      continue;
    }
    std::string path = directory_ + "/" + shards_[s].file, data;
    if (auto problem = verify_file(path, shards_[s].bytes, shards_[s].crc32, &data); !problem.empty()) return problem;
    auto archive = std::make_shared<torch::serialize::InputArchive>();
    try {
      archive->load_from(data.data(), data.size());
    } catch (const c10::Error&) {
      return path + ": not a readable checkpoint shard";
    }
    read_[s] = std::move(archive);
  }
  return "";
}

torch::Tensor CheckpointReader::piece_tensor(const Piece& piece, const std::string& what) {
  const std::string key = piece.key + what;
  torch::Tensor t;
  if (auto adopted = adopted_.find(key); adopted != adopted_.end()) {
    t = adopted->second;
  } else if (!read_.at(piece.shard)->try_read(key, t)) {
    throw FileError(directory_ + "/" + shards_[piece.shard].file + ": no " + key + " as its manifest says");
  }
  if (what == "step") return t;
  const int64_t numel = piece.box.numel();
  if (piece.first >= 0 ? t.numel() < piece.first + numel : t.numel() != numel)
    throw FileError(directory_ + "/" + shards_[piece.shard].file + ": " + key + " holds " + std::to_string(t.numel()) +
                    " elements, not the " + std::to_string(numel) + " of its box " + piece.box.describe());
  return piece.first >= 0 ? t.reshape(-1).narrow(0, piece.first, numel).view(piece.box.sizes) : t.reshape(piece.box.sizes);
}

void CheckpointReader::restore(const CheckpointLayout& layout, torch::nn::Module& model,
                                      torch::optim::Optimizer& optimizer, int rank) {
  torch::NoGradGuard no_grad;
  std::map<std::string, std::size_t> saved;
  for (std::size_t i = 0; i < names_.size(); ++i) saved[names_[i]] = i;
  const std::size_t slots = static_cast<std::size_t>(slots_of(optimizer));
  for (const OwnedRange& mine : layout.ranges) {
    const std::size_t parameter = saved.at(layout.names[mine.parameter]);
    const int64_t numel = mine.value.numel();
    torch::Tensor value = torch::empty({numel}, mine.value.options());
    std::vector<torch::Tensor> state_slots;
    for (std::size_t s = 0; s < slots; ++s) state_slots.push_back(torch::zeros({numel}, mine.value.options()));
    int64_t step = -1, covered = 0;
    for (const RunBox& target : boxes_of(mine, layout.shapes[mine.parameter])) {
      auto into = [&](const torch::Tensor& flat) {
        return flat.narrow(0, target.first, target.box.numel()).view(target.box.sizes);
      };
      for (std::size_t k : pieces_of(parameter)) {
        const Piece& piece = pieces_[k];
        auto overlap = box_overlap(target.box, piece.box);
        if (!overlap) continue;
        narrow_to(into(value), target.box, *overlap).copy_(narrow_to(piece_tensor(piece, "value"), piece.box, *overlap));
        const int64_t piece_step = piece_tensor(piece, "step").item<int64_t>();
        step = std::max(step, piece_step);
        for (std::size_t s = 0; s < slots && piece_step >= 0; ++s)  // a piece without state has no slots
          narrow_to(into(state_slots[s]), target.box, *overlap)
              .copy_(narrow_to(piece_tensor(piece, "slot" + std::to_string(s)), piece.box, *overlap));
        covered += overlap->numel();
      }
    }
    if (covered != numel)
      throw FileError(manifest_path_ + ": its pieces hold " + std::to_string(covered) + " of elements [" +
                      std::to_string(mine.begin) + ", " + std::to_string(mine.begin + numel) + ") of " +
                      layout.names[mine.parameter]);
    mine.value.copy_(value.view(mine.value.sizes()));  // logical order, whatever its layout
    StateTensors state;
    state.step = torch::full({1}, step, torch::kLong);
    for (auto& slot : state_slots) state.slots.push_back(slot.view(mine.stepped.sizes()));
    write_state(optimizer, mine.stepped, state);
  }
  for (const auto& [name, buffer] : unique_buffers(model)) {
    torch::Tensor value;
    common_->archive->read(buffer_prefix_ + name, value);
    buffer.copy_(value);
  }
  restore_rng(*common_->archive, rank);
  read_.clear();
}

}  // namespace ddp
