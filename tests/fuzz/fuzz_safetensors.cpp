// tests/fuzz/fuzz_safetensors.cpp — fuzzes the safetensors reader (src/hf/safetensors.cpp): the
// input bytes are the file itself (the parser is ours, so raw bytes reach every check). The reader
// must answer with tensors or a UserError naming the file, nothing else. Tensors it accepts must
// match their shapes, and written back by write_safetensors (fp32) must read back bit for bit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "hf/safetensors.h"
#include "sftdp/check.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what.c_str());
  std::abort();
}

void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0)
    finding("cannot write the scratch file " + path);
}

sftdp::hf::TensorMap read_or_null(const std::string& path, bool& accepted) {
  accepted = false;
  try {
    sftdp::hf::TensorMap m = sftdp::hf::read_safetensors(path);
    accepted = true;
    return m;
  } catch (const sftdp::UserError& e) {
    const std::string msg = e.what();
    if (msg.rfind(path, 0) != 0) finding("UserError does not start with the file name: " + msg);
    return {};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sftdp;
  if (size > 8192) return -1;  // larger inputs add nothing but time; not kept in the corpus
  fuzz::internal_errors_abort();
  static const std::string in_path = fuzz::scratch_path("st_in") + ".safetensors";
  static const std::string out_path = fuzz::scratch_path("st_out") + ".safetensors";
  write_bytes(in_path, data, size);

  bool accepted = false;
  const hf::TensorMap got = read_or_null(in_path, accepted);
  if (!accepted) return 0;

  std::vector<hf::NamedTensor> named;
  for (const auto& [name, t] : got) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) finding("tensor " + name + ": negative dimension accepted");
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != t.data.size()) finding("tensor " + name + ": data size does not match its shape");
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
      finding("tensor " + name + ": unexpected dtype " + t.dtype);
    named.push_back({name, t.shape, t.data.data()});
  }

  // Accepted: the fp32 rewrite must read back to the same tensors, bit for bit (NaNs included).
  try {
    hf::write_safetensors(out_path, named, {{"format", "pt"}});
  } catch (const UserError& e) {
    finding(std::string("write_safetensors of accepted tensors failed: ") + e.what());
  }
  bool again_ok = false;
  const hf::TensorMap again = read_or_null(out_path, again_ok);
  if (!again_ok) finding("the fp32 rewrite of an accepted file is rejected");
  if (again.size() != got.size()) finding("the fp32 rewrite has another number of tensors");
  for (const auto& [name, t] : got) {
    const auto it = again.find(name);
    if (it == again.end()) finding("tensor " + name + " missing from the fp32 rewrite");
    if (it->second.shape != t.shape || it->second.dtype != "F32" ||
        it->second.data.size() != t.data.size() ||
        (!t.data.empty() &&
         std::memcmp(it->second.data.data(), t.data.data(), t.data.size() * sizeof(float)) != 0))
      finding("tensor " + name + " differs in the fp32 rewrite");
  }
  std::error_code ec;
  std::filesystem::remove(out_path, ec);
  return 0;
}
