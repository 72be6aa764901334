// tests/train/test_tensorboard.cpp — the tfevents encoder (src/train/tensorboard.h): CRC32C
// against its published check value, the record framing and its reader round trip (corruption and
// truncation caught), the exact protobuf bytes of a scalar Event, and a written file's records.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/test_util.h"
#include "train/metrics.h"
#include "train/tensorboard.h"

namespace sftdp::train::tensorboard {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

TEST(TensorBoard, Crc32cCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(TensorBoard, MaskedCrc) {
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, RecordLayoutAndRoundTrip) {
  const std::string data = "hello, events";
  const std::string r = record(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  uint64_t len;
  std::memcpy(&len, r.data(), 8);
  EXPECT_EQ(len, data.size());
  uint32_t len_crc, data_crc;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 12 + data.size(), 4);
  EXPECT_EQ(len_crc, masked_crc32c(r.data(), 8));
  EXPECT_EQ(data_crc, masked_crc32c(data.data(), data.size()));
  EXPECT_EQ(r.substr(12, data.size()), data);

  const std::string two = r + record(std::string("\0x\0", 3));
  const auto back = read_records(two);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0], data);
  EXPECT_EQ(back[1], std::string("\0x\0", 3));
  EXPECT_TRUE(read_records("").empty());
}

TEST(TensorBoard, ReaderCatchesCorruptionAndTruncation) {
  const std::string r = record("some data");
  for (size_t i = 0; i < r.size(); ++i) {
    std::string bad = r;
    bad[i] ^= 0x01;
    EXPECT_THROW(read_records(bad), std::runtime_error) << "flipped byte " << i;
  }
  for (size_t n = 1; n < r.size(); ++n)
    EXPECT_THROW(read_records(r.substr(0, n)), std::runtime_error) << "first " << n << " bytes";
}

TEST(TensorBoard, ScalarEventBytes) {
  // Event{wall_time: 1.5, step: 300, summary{value{tag: "a", simple_value: 2.0}}}
  const std::string want =
      bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,  // 1: double 1.5
             0x10, 0xAC, 0x02,                    // 2: varint 300
             0x2A, 0x0A,                          // 5: Summary, 10 bytes
             0x0A, 0x08,                          //   1: Value, 8 bytes
             0x0A, 0x01, 'a',                     //     1: tag "a"
             0x15, 0, 0, 0, 0x40});               //     2: float 2.0
  EXPECT_EQ(scalar_event(1.5, 300, "a", 2.0f), want);
}

TEST(TensorBoard, FileVersionAndSessionStartBytes) {
  std::string v = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 0x1A, 13}) + "brain.Event:2";
  EXPECT_EQ(file_version_event(1.0), v);
  EXPECT_EQ(session_start_event(1.0, 5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 0x10, 5, 0x3A, 2, 0x08, 1}));
}

TEST(TensorBoard, WriterFileHoldsVersionThenScalars) {
  test::TempDir dir;
  std::string path;
  {
    EventWriter w(dir / "tb");
    path = w.path();
    EXPECT_CONTAINS(path, "/tb/events.out.tfevents.");
    w.scalar(1, "train/loss", 3.25);
    w.scalar(1, "train/lr", 1e-3);
    w.flush();
  }
  const auto recs = read_records(test::read_file(path));
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].substr(9), bytes({0x1A, 13}) + "brain.Event:2");
  EXPECT_EQ(recs[1].substr(9), scalar_event(0, 1, "train/loss", 3.25f).substr(9));
  EXPECT_EQ(recs[2].substr(9), scalar_event(0, 1, "train/lr", 1e-3f).substr(9));
}

TEST(TensorBoard, MetricsWriterFreshRunReplacesEventFiles) {
  test::TempDir dir;
  const std::string metrics = dir / "run/metrics.jsonl";
  test::write_file(dir / "other.txt", "");
  std::filesystem::create_directories(dir / "run/tensorboard");
  test::write_file(dir / "run/tensorboard/events.out.tfevents.1.h.1.sftdp", "old");
  test::write_file(dir / "run/tensorboard/notes.txt", "kept");
  {
    MetricsWriter m(metrics, -1);
    StepMetrics s;
    s.step = 1, s.loss = 2.0, s.lr = 0.5, s.grad_norm = 1.0, s.tokens_per_s = 100;
    m.step(s);
    s.step = 2, s.skipped = true;
    m.step(s);
    m.eval(2, 1.75, 10);
  }
  const auto files = test::list_files(dir / "run/tensorboard");
  ASSERT_EQ(files.size(), 2u);  // the new event file and notes.txt
  std::string events = files[0].find("notes.txt") == std::string::npos ? files[0] : files[1];
  const auto recs = read_records(test::read_file(events));
  // version; step 1: loss, grad_norm, tokens_per_s, lr; step 2 (skipped): lr; eval: loss.
  ASSERT_EQ(recs.size(), 1u + 4u + 1u + 1u);
  EXPECT_EQ(recs[5].substr(9), scalar_event(0, 2, "train/lr", 0.5f).substr(9));
  EXPECT_EQ(recs[6].substr(9), scalar_event(0, 2, "eval/loss", 1.75f).substr(9));
}

TEST(TensorBoard, MetricsWriterResumeStartsWithSessionStart) {
  test::TempDir dir;
  const std::string metrics = dir / "run/metrics.jsonl";
  { MetricsWriter m(metrics, -1); }
  { MetricsWriter m(metrics, 4); }
  const auto files = test::list_files(dir / "run/tensorboard");
  ASSERT_EQ(files.size(), 2u);  // a resumed run adds a file, it keeps the earlier one
  bool found = false;
  for (const auto& f : files) {
    const auto recs = read_records(test::read_file(f));
    if (recs.size() == 2) {
      EXPECT_EQ(recs[1].substr(9), session_start_event(0, 5).substr(9));
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace sftdp::train::tensorboard
