// tests/hf/test_safetensors.cpp — the safetensors reader and writer (src/hf/safetensors.h):
// round trip, fp16/bf16 conversion, sharded index, and every malformed input as a UserError
// naming the file and tensor.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include "hf/safetensors.h"
#include "sftdp/check.h"

namespace fs = std::filesystem;
using namespace sftdp::hf;

namespace {

std::string temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("sftdp_st_" + std::to_string(::getpid()) + "_" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// A raw file: header text (unpadded) then data bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data, uint64_t n = UINT64_MAX) {
  std::ofstream f(path, std::ios::binary);
  if (n == UINT64_MAX) n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << data;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const sftdp::UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Safetensors, WriteReadRoundTripIsBitwise) {
  const std::string d = temp_dir(), path = d + "/m.safetensors";
  std::vector<float> a = {1.0f, -2.5f, 3.25e-8f, 1e30f, 0.0f, -0.0f}, b = {7.0f};
  write_safetensors(path, {{"a", {2, 3}, a.data()}, {"b.x", {1}, b.data()}}, {{"format", "pt"}});
  uint64_t n = 0;
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);  // header padded: the data starts 8-byte aligned
  EXPECT_EQ(fs::file_size(path), 8 + n + 28);
  const TensorMap m = read_safetensors(path);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(m.at("a").data.data(), a.data(), 24), 0);
  EXPECT_EQ(m.at("b.x").data[0], 7.0f);
  EXPECT_FALSE(fs::exists(d + "/.m.safetensors.tmp." + std::to_string(::getpid())));
}

TEST(Safetensors, HalfAndBfloat16Convert) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
  const std::string d = temp_dir();
  write_raw(d + "/h.safetensors",
            R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})",
            std::string("\x00\x3c\x00\xc0\x80\x3f", 6));
  const TensorMap m = read_safetensors(d + "/h.safetensors");
  EXPECT_EQ(m.at("h").data, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(m.at("b").data, (std::vector<float>{1.0f}));
}

TEST(Safetensors, MalformedInputsNameFileAndTensor) {
  const std::string d = temp_dir(), p = d + "/bad.safetensors";
  const std::string ok_data(8, '\0');
  struct Case {
    std::string header, data, expect;
    uint64_t n = UINT64_MAX;
  };
  const std::vector<Case> cases = {
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "", "header length 999999", 999999},
      {"", "", "exceeds the", kMaxHeaderBytes + 1},
      {"{not json", ok_data, "not valid JSON"},
      {R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", ok_data, "tensor w: unknown or unsupported dtype \"I64\""},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", ok_data, "tensor w: data_offsets [0,8] hold 8 bytes"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", ok_data, "tensor w: data_offsets [0,16] run past"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       ok_data, "overlaps"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", ok_data, "tensor w: data_offsets must be"},
      {R"([1,2])", ok_data, "not a JSON object"},
      {R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,0]}})", ok_data,
       "tensor w: shape [1099511627776,1099511627776] is too large"},
  };
  for (const auto& c : cases) {
    write_raw(p, c.header, c.data, c.n);
    const std::string msg = error_of([&] { read_safetensors(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected \"" << c.expect << "\" in: " << msg;
  }
  std::ofstream(p, std::ios::binary) << "abc";  // shorter than the length field
  EXPECT_NE(error_of([&] { read_safetensors(p); }).find("truncated"), std::string::npos);
  EXPECT_NE(error_of([&] { read_safetensors(d + "/absent.safetensors"); }).find("not found"), std::string::npos);
}

TEST(Safetensors, ShardedIndex) {
  const std::string d = temp_dir();
  std::vector<float> a = {1, 2}, b = {3};
  write_safetensors(d + "/s1.safetensors", {{"a", {2}, a.data()}});
  write_safetensors(d + "/s2.safetensors", {{"b", {1}, b.data()}});
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})";
  const TensorMap m = read_safetensors_dir(d);
  EXPECT_EQ(m.at("a").data, a);
  EXPECT_EQ(m.at("b").data, b);
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})";
  const std::string msg = error_of([&] { read_safetensors_dir(d); });
  EXPECT_NE(msg.find("s2.safetensors: tensor c"), std::string::npos) << msg;
}
