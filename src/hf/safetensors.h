// src/hf/safetensors.h — safetensors files (Hugging Face): an 8-byte little-endian header length
// N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__"?}, then the
// raw little-endian data. The reader accepts F32, F16 and BF16 and returns fp32; any malformed
// input throws UserError naming the file (and the tensor). The writer writes fp32 only, the header
// padded to 8 bytes, atomically (temporary name, then rename).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sftdp::hf {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, numel(shape) floats
  std::string file;         // where it was read from (for messages)
  std::string dtype;        // on disk: F32 | F16 | BF16
};
using TensorMap = std::map<std::string, Tensor>;

// Largest JSON header the reader accepts (the format's own reference limit is 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// One .safetensors file, every tensor converted to fp32.
TensorMap read_safetensors(const std::string& path);
// A model directory: model.safetensors, or the shards listed by model.safetensors.index.json
// (weight_map: tensor name -> shard file); each tensor must be in the shard the index names.
TensorMap read_safetensors_dir(const std::string& dir);
// The file read_safetensors_dir(dir) starts from: model.safetensors, else the index (for messages
// about a tensor the directory lacks).
std::string safetensors_dir_source(const std::string& dir);
// Throws UserError("<t.file>: tensor <name> has shape [..], config.json needs [..]") unless
// t.shape == want.
void require_shape(const Tensor& t, const std::string& name, const std::vector<int64_t>& want);

// Writes fp32 tensors (in the given order) with optional string metadata, atomically.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// fp16 / bf16 bit patterns to fp32 (exact).
float half_to_float(uint16_t h);
float bf16_to_float(uint16_t b);

}  // namespace sftdp::hf
