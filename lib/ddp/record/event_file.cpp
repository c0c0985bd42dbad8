#include "ddp/record/event_file.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/hostname.h"
#include "ddp/record/crc32c.h"

namespace ddp {
namespace {

// Note [Event encoding]
// The protobuf wire format of the fields TensorBoard reads from us (tensorboard/compat/proto):
//   Event:            wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
//                     summary = 5 (Summary)
//   Summary:          value = 1 (repeated Value)
//   Summary.Value:    tag = 1 (string), simple_value = 2 (float), tensor = 8 (TensorProto),
//                     metadata = 9 (SummaryMetadata)
//   SummaryMetadata:  plugin_data = 1 (PluginData: plugin_name = 1 (string))
//   TensorProto:      dtype = 1 (DT_STRING = 7), tensor_shape = 2 (empty: a scalar), string_val = 8
// A field is a varint key (number << 3 | wire type) then its value: varint (0), 64-bit little
// endian (1), length-delimited (2: a varint length, then the bytes), 32-bit little endian (5).

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }

template <typename T>
void put_little_endian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86 and ARM Linux are little endian, as the format is
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event(int64_t step, const std::string& what_field) {
  std::string e;
  put_key(e, 1, 1);
  put_little_endian(e, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e + what_field;
}

std::string summary_event(int64_t step, const std::string& value) {
  std::string summary;
  put_bytes(summary, 1, value);
  std::string what;
  put_bytes(what, 5, summary);
  return event(step, what);
}

}  // namespace

std::string tfrecord(const std::string& data) {
  std::string out;
  uint64_t length = data.size();
  put_little_endian(out, length);
  put_little_endian(out, masked_crc32c(out.data(), sizeof length));
  out += data;
  put_little_endian(out, masked_crc32c(data.data(), data.size()));
  return out;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_output_error("cannot create the TensorBoard directory " + dir + ": " + ec.message(), ec.value());
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  path_ = dir + "/events.out.tfevents." + std::to_string(seconds.count()) + "." + hostname() + "." +
          std::to_string(getpid());
  int fd = open_for_append(path_, /*truncate=*/true);
  file_ = fdopen(fd, "w");
  if (!file_) {
    std::string cause = std::strerror(errno);
    close(fd);
    throw IoError("cannot write TensorBoard events to " + path_ + ": " + cause);
  }
  std::string version;
  put_bytes(version, 3, "brain.Event:2");
  write_event(event(0, version));
  flush();
}

EventFileWriter::~EventFileWriter() { std::fclose(file_); }

void EventFileWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_little_endian(v, static_cast<float>(value));
  write_event(summary_event(step, v));
}

void EventFileWriter::add_text(const std::string& tag, int64_t step, const std::string& text) {
  std::string plugin_data, metadata, shape, tensor, v;
  put_bytes(plugin_data, 1, "text");
  put_bytes(metadata, 1, plugin_data);
  put_key(tensor, 1, 0);
  put_varint(tensor, 7);  // DT_STRING
  put_bytes(tensor, 2, shape);
  put_bytes(tensor, 8, text);
  put_bytes(v, 1, tag);
  put_bytes(v, 8, tensor);
  put_bytes(v, 9, metadata);
  write_event(summary_event(step, v));
}

void EventFileWriter::flush() {
  if (std::fflush(file_) != 0) throw IoError("cannot write TensorBoard events to " + path_ + ": " + std::strerror(errno));
}

void EventFileWriter::write_event(const std::string& e) {
  std::string record = tfrecord(e);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    throw IoError("cannot write TensorBoard events to " + path_ + ": " + std::strerror(errno));
}

}  // namespace ddp
