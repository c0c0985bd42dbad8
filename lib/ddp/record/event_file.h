#pragma once
// TensorBoard event files without TensorFlow or protobuf: TFRecord framing (length, masked CRC-32C
// of the length, the record, masked CRC-32C of the record) around `Event` messages encoded by hand.
// See Note [Event encoding] in event_file.cpp for the few fields we write.

#include <cstdint>
#include <cstdio>
#include <string>

namespace ddp {

/// Appends scalars and text to a new event file that TensorBoard reads as it grows.
class EventFileWriter {
 public:
  /// Creates `dir` if needed and a new file in it, events.out.tfevents.TIME.HOST.PID (a resumed run
  /// adds a file; TensorBoard orders the events by step), then writes the file-version event.
  /// IoError or FileError when it cannot.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// A point of the scalar series `tag` (TensorBoard's simple_value, a float).
  void add_scalar(const std::string& tag, int64_t step, double value);

  /// Text for TensorBoard's text tab (the text plugin's string tensor), shown as markdown.
  void add_text(const std::string& tag, int64_t step, const std::string& text);

  /// Pushes what was written to the file, so a reader sees whole records.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

/// One TFRecord: the framing around `data`.
std::string tfrecord(const std::string& data);

}  // namespace ddp
