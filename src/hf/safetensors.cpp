// src/hf/safetensors.cpp — see safetensors.h. The reader checks the header against the file
// before reading any data: header length within the file and kMaxHeaderBytes, JSON that parses,
// known dtypes, offsets inside the data region that match shape × dtype size and do not overlap.
#include "hf/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sftdp/check.h"

namespace sftdp::hf {
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UserError(path + ": " + what);
}

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const json& j, uint64_t data_bytes) {
  const std::string where = "tensor " + name + ": ";
  if (!j.is_object()) bad(path, where + "header entry is not an object");
  Entry e;
  e.name = name;
  if (!j.contains("dtype") || !j["dtype"].is_string()) bad(path, where + "no dtype string");
  e.dtype = j["dtype"].get<std::string>();
  const size_t esize = dtype_bytes(e.dtype);
  if (esize == 0) bad(path, where + "unknown or unsupported dtype \"" + e.dtype + "\" (F32, F16, BF16 are read)");
  if (!j.contains("shape") || !j["shape"].is_array()) bad(path, where + "no shape array");
  uint64_t numel = 1;
  for (const auto& s : j["shape"]) {
    if (!s.is_number_unsigned() || s.get<uint64_t>() > (1ull << 40)) bad(path, where + "bad shape " + j["shape"].dump());
    const uint64_t dim = s.get<uint64_t>();
    e.shape.push_back(static_cast<int64_t>(dim));
    if (dim != 0 && numel > (1ull << 40) / dim) bad(path, where + "shape " + j["shape"].dump() + " is too large");
    numel *= dim;
  }
  const json& off = j.contains("data_offsets") ? j["data_offsets"] : json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad(path, where + "data_offsets must be [begin, end]");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) bad(path, where + "data_offsets " + off.dump() + " end before begin");
  if (e.end - e.begin != numel * esize)
    bad(path, where + "data_offsets " + off.dump() + " hold " + std::to_string(e.end - e.begin) +
                  " bytes, shape " + j["shape"].dump() + " of " + e.dtype + " needs " + std::to_string(numel * esize));
  if (e.end > data_bytes)
    bad(path, where + "data_offsets " + off.dump() + " run past the end of the data (" +
                  std::to_string(data_bytes) + " bytes: truncated file?)");
  return e;
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);             // zero, subnormal
  else if (exp == 31) v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TensorMap read_safetensors(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) bad(path, "not found (or not a file)");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) bad(path, "cannot read its size: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot open");
  unsigned char lenb[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(lenb), 8)) bad(path, "shorter than the 8-byte header length (truncated?)");
  const uint64_t n = read_u64_le(lenb);
  if (n > kMaxHeaderBytes)
    bad(path, "header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxHeaderBytes) + "-byte limit");
  if (n > size - 8)
    bad(path, "header length " + std::to_string(n) + " is larger than the file (" + std::to_string(size) +
                  " bytes: truncated?)");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) bad(path, "cannot read the header");
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad(path, "header is not a JSON object");
  const uint64_t data_bytes = size - 8 - n;
  std::vector<Entry> entries;
  for (const auto& [name, j] : header.items())
    if (name != "__metadata__") entries.push_back(parse_entry(path, name, j, data_bytes));
  std::vector<const Entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      bad(path, "tensor " + by_offset[i]->name + ": data overlaps tensor " + by_offset[i - 1]->name);

  TensorMap out;
  std::vector<uint16_t> half;
  for (const auto& e : entries) {
    Tensor t;
    t.shape = e.shape;
    t.file = path;
    t.dtype = e.dtype;
    const size_t numel = (e.end - e.begin) / dtype_bytes(e.dtype);
    t.data.resize(numel);
    in.seekg(static_cast<std::streamoff>(8 + n + e.begin));
    // Little-endian on disk and in memory (static_assert above): F32 is read in place.
    char* dst = e.dtype == "F32" ? reinterpret_cast<char*>(t.data.data())
                                 : reinterpret_cast<char*>((half.resize(numel), half.data()));
    if (!in.read(dst, static_cast<std::streamsize>(e.end - e.begin)))
      bad(path, "tensor " + e.name + ": cannot read its data (truncated?)");
    if (e.dtype != "F32") {
      const bool fp16 = e.dtype == "F16";
      for (size_t i = 0; i < numel; ++i) t.data[i] = fp16 ? half_to_float(half[i]) : bf16_to_float(half[i]);
    }
    out.emplace(e.name, std::move(t));
  }
  return out;
}

std::string safetensors_dir_source(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  return (fs::exists(single, ec) ? single : fs::path(dir) / "model.safetensors.index.json").string();
}

void require_shape(const Tensor& t, const std::string& name, const std::vector<int64_t>& want) {
  if (t.shape == want) return;
  auto text = [](const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  };
  throw UserError(t.file + ": tensor " + name + " has shape " + text(t.shape) + ", config.json needs " + text(want));
}

TensorMap read_safetensors_dir(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) return read_safetensors(single.string());
  if (!fs::exists(index, ec))
    throw UserError(dir + ": holds neither model.safetensors nor model.safetensors.index.json");
  json j;
  try {
    std::ifstream f(index);
    j = json::parse(f);
  } catch (const json::exception& e) {
    bad(index.string(), std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    bad(index.string(), "no weight_map object");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      bad(index.string(), "weight_map: tensor " + name + ": shard must be a file name in " + dir);
    by_shard[file.get<std::string>()].push_back(name);
  }
  TensorMap out;
  for (const auto& [file, names] : by_shard) {
    const std::string shard_path = (fs::path(dir) / file).string();
    TensorMap shard = read_safetensors(shard_path);
    for (const auto& name : names) {
      auto it = shard.find(name);
      if (it == shard.end()) bad(shard_path, "tensor " + name + ": listed in " + index.string() + " but absent");
      out.emplace(name, std::move(it->second));
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (auto s : t.shape) numel *= static_cast<uint64_t>(s);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + 4 * numel}}};
    off += 4 * numel;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const fs::path final_path(path);
  std::string temp_name = ".";  // (built by +=: GCC 12 warns falsely on "." + string)
  temp_name += final_path.filename().string();
  temp_name += ".tmp.";
  temp_name += std::to_string(getpid());
  const std::string temp = (final_path.parent_path() / temp_name).string();
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    unsigned char lenb[8];
    for (int i = 0; i < 8; ++i) lenb[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(lenb), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors) {
      uint64_t numel = 1;
      for (auto s : t.shape) numel *= static_cast<uint64_t>(s);
      out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(4 * numel));
    }
    out.flush();
    if (!out) {
      std::remove(temp.c_str());
      throw UserError(path + ": cannot write");
    }
  }
  std::error_code ec;
  fs::rename(temp, final_path, ec);
  if (ec) {
    std::remove(temp.c_str());
    throw UserError(path + ": cannot rename into place: " + ec.message());
  }
}

}  // namespace sftdp::hf
