// src/train/tensorboard.h — TensorBoard event files (tfevents) written without protobuf: each
// record is uint64 length, masked CRC32C of the length, a serialized tensorflow.Event, masked
// CRC32C of the data, all little-endian. Scalars only (Summary.Value.simple_value, a float32).
// Written by rank 0 beside metrics.jsonl (SPEC §6); one new file per run, so a resumed run
// continues in a second file of the same directory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace sftdp::train::tensorboard {

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78); crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

// One framed record around data.
std::string record(std::string_view data);
// The records of a file's bytes, CRCs checked; throws std::runtime_error on a torn or corrupt
// record (for tests and tools: the trainer only writes).
std::vector<std::string> read_records(std::string_view bytes);

// Serialized tensorflow.Event messages.
std::string file_version_event(double wall_time);  // file_version "brain.Event:2"
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
// SessionLog{status: START} at step: TensorBoard's loader drops points of earlier files with
// step >= this one (the steps a crashed run wrote after the checkpoint a resumed run starts from).
std::string session_start_event(double wall_time, int64_t step);

// Seconds since the Unix epoch, as TensorBoard expects in wall_time.
double wall_time_now();

class EventWriter {
 public:
  // Creates dir and a new file events.out.tfevents.<unix time>.<host>.<pid>.sftdp in it, starting
  // with the file_version event. A file that cannot be created is a UserError naming it.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  void scalar(int64_t step, std::string_view tag, double value);
  void session_start(int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace sftdp::train::tensorboard
