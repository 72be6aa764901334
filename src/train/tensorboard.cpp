// src/train/tensorboard.cpp — the record framing, a table CRC32C and the few protobuf fields of
// tensorflow.Event that scalars need, encoded by hand (varint tags, fixed64 double, fixed32 float).
#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "sftdp/check.h"

namespace sftdp::train::tensorboard {

static_assert(std::endian::native == std::endian::little, "event files are little-endian");

namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

// Protobuf wire types.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, uint32_t field, Wire wire) { put_varint(out, (field << 3) | wire); }
template <class T>
void put_raw(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, std::string_view s) {
  put_tag(out, field, kBytes);
  put_varint(out, s.size());
  out.append(s);
}

// Event fields 1 (wall_time) and 2 (step), shared by every event.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, kFixed64);
  put_raw(e, wall_time);
  if (step != 0) {  // proto3 default omitted, as protobuf itself writes it
    put_tag(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string record(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_raw(r, static_cast<uint64_t>(data.size()));
  put_raw(r, masked_crc32c(r.data(), 8));
  r.append(data);
  put_raw(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::vector<std::string> read_records(std::string_view bytes) {
  std::vector<std::string> out;
  size_t pos = 0;
  auto u32_at = [&](size_t at) { uint32_t v; std::memcpy(&v, bytes.data() + at, 4); return v; };
  while (pos < bytes.size()) {
    const std::string where =
        "record " + std::to_string(out.size()) + " at byte " + std::to_string(pos);
    if (bytes.size() - pos < 12) throw std::runtime_error(where + ": truncated header");
    uint64_t len;
    std::memcpy(&len, bytes.data() + pos, 8);
    if (u32_at(pos + 8) != masked_crc32c(bytes.data() + pos, 8))
      throw std::runtime_error(where + ": length CRC mismatch");
    if (bytes.size() - pos - 12 < len || bytes.size() - pos - 12 - len < 4)
      throw std::runtime_error(where + ": truncated data");
    std::string_view data = bytes.substr(pos + 12, len);
    if (u32_at(pos + 12 + len) != masked_crc32c(data.data(), data.size()))
      throw std::runtime_error(where + ": data CRC mismatch");
    out.emplace_back(data);
    pos += 12 + len + 4;
  }
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value{tag = 1, simple_value = 2}
  put_bytes(v, 1, tag);
  put_tag(v, 2, kFixed32);
  put_raw(v, value);
  std::string s;  // Summary{repeated Value value = 1}
  put_bytes(s, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, s);
  return e;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;  // SessionLog{status = 1: START (1)}
  put_tag(log, 1, kVarint);
  put_varint(log, 1);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 7, log);
  return e;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  const double now = wall_time_now();
  std::string stem = dir + "/events.out.tfevents.";
  stem.append(std::to_string(static_cast<long long>(now))).append(".").append(host);
  stem.append(".").append(std::to_string(getpid()));
  // Never reuse a file: a second writer of this process in the same second gets stem.<n>.sftdp.
  for (int n = 0; !f_; ++n) {
    path_ = stem;
    if (n) path_.append(".").append(std::to_string(n));
    path_.append(".sftdp");
    f_ = std::fopen(path_.c_str(), "wbx");
    if (!f_ && (errno != EEXIST || n == 1000))
      throw UserError(path_ + ": cannot create TensorBoard event file: " + std::strerror(errno));
  }
  write(file_version_event(now));
  flush();
}

EventWriter::~EventWriter() {
  if (f_) std::fclose(f_);
}

void EventWriter::write(const std::string& event) {
  const std::string r = record(event);
  std::fwrite(r.data(), 1, r.size(), f_);
}

void EventWriter::scalar(int64_t step, std::string_view tag, double value) {
  write(scalar_event(wall_time_now(), step, tag, static_cast<float>(value)));
}

void EventWriter::session_start(int64_t step) { write(session_start_event(wall_time_now(), step)); }

void EventWriter::flush() { std::fflush(f_); }

}  // namespace sftdp::train::tensorboard
