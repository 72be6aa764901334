// src/data/tokenizer_identity.cpp — the tokenizer a data file was made with (SPEC §4 root
// attributes tokenizer / tokenizer_hash) against the model's: hashes of a directory's tokenizer
// files, reading the attributes, and the start-up check that names both sides.
#include "data/tokenizer_identity.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/tokenizer.h"
#include "h5/h5.h"
#include "sftdp/check.h"
#include "sftdp/check_h5.h"

namespace sftdp::data {
namespace fs = std::filesystem;

uint64_t fnv1a64(std::string_view bytes, uint64_t state) {
  for (const char c : bytes) {
    state ^= static_cast<unsigned char>(c);
    state *= 0x100000001b3ULL;
  }
  return state;
}

std::string hex16(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

TokenizerIdentity byte_tokenizer_identity() {
  return {"byte", hex16(fnv1a64("sft-dp byte tokenizer v1"))};
}

namespace {

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path.string() + ": cannot be opened for reading");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The string value of root attribute `name`, or nullopt when absent.
std::optional<std::string> string_attr(const std::string& path, hid_t file, const char* name) {
  if (H5Aexists_by_name(file, "/", name, H5P_DEFAULT) <= 0) return std::nullopt;
  h5::Handle attr(CHECK_H5(H5Aopen_by_name(file, "/", name, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  h5::Handle type(CHECK_H5(H5Aget_type(attr.get())), H5Tclose);
  h5::Handle space(CHECK_H5(H5Aget_space(attr.get())), H5Sclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Sget_simple_extent_npoints(space.get()) != 1)
    h5::bad_file(path, std::string("root attribute ") + name + " must be one string, found " +
                           h5::type_name(type.get()));
  h5::Handle mem(CHECK_H5(H5Tcopy(H5T_C_S1)), H5Tclose);
  CHECK_H5(H5Tset_cset(mem.get(), H5Tget_cset(type.get())));
  if (H5Tis_variable_str(type.get()) > 0) {
    CHECK_H5(H5Tset_size(mem.get(), H5T_VARIABLE));
    char* data = nullptr;
    CHECK_H5(H5Aread(attr.get(), mem.get(), &data));
    std::string value = data ? data : "";
    H5free_memory(data);
    return value;
  }
  const size_t size = H5Tget_size(type.get());
  CHECK_H5(H5Tset_size(mem.get(), size));
  std::string buffer(size, '\0');
  CHECK_H5(H5Aread(attr.get(), mem.get(), buffer.data()));
  return buffer.substr(0, buffer.find('\0'));
}

bool is_hash(const std::string& s) {
  if (s.size() != 16) return false;
  for (const char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

std::vector<TokenizerFiles> tokenizer_files_of(const std::string& dir) {
  const std::vector<std::vector<const char*>> definitions = {
      {"tokenizer.json"}, {"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}};
  std::vector<TokenizerFiles> out;
  std::error_code ec;
  for (const auto& files : definitions) {
    bool all = true;
    for (const char* f : files) all = all && fs::is_regular_file(fs::path(dir) / f, ec);
    if (!all) continue;
    TokenizerFiles t;
    uint64_t state = kFnvOffset;
    for (const char* f : files) {
      state = fnv1a64(file_bytes(fs::path(dir) / f), state);
      t.files += (t.files.empty() ? "" : " + ") + std::string(f);
    }
    t.hash = hex16(state);
    out.push_back(t);
  }
  return out;
}

std::optional<TokenizerIdentity> read_tokenizer_identity(const std::string& data_path) {
  const h5::QuietErrors quiet;
  h5::Handle file(H5Fopen(data_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) h5::bad_file(data_path, "cannot be opened (permissions? damaged file?)");
  const auto name = string_attr(data_path, file.get(), "tokenizer");
  const auto hash = string_attr(data_path, file.get(), "tokenizer_hash");
  if (!name && !hash) return std::nullopt;
  if (!name || !hash)
    h5::bad_file(data_path, std::string("has root attribute ") + (name ? "tokenizer" : "tokenizer_hash") +
                                " but not " + (name ? "tokenizer_hash" : "tokenizer") +
                                " (SPEC §4: both or neither)");
  if (*name != "byte" && *name != "hf")
    h5::bad_file(data_path, "root attribute tokenizer must be \"byte\" or \"hf\", found \"" + *name + "\"");
  if (!is_hash(*hash))
    h5::bad_file(data_path, "root attribute tokenizer_hash must be 16 lowercase hex digits, found \"" +
                                *hash + "\"");
  return TokenizerIdentity{*name, *hash};
}

std::vector<std::string> check_tokenizer_identity(const std::vector<std::string>& data_paths,
                                                  const std::string& model_dir, int64_t model_vocab) {
  std::vector<std::string> lines;
  const std::vector<TokenizerFiles> model_files =
      model_dir.empty() ? std::vector<TokenizerFiles>{} : tokenizer_files_of(model_dir);
  for (const auto& path : data_paths) {
    const auto id = read_tokenizer_identity(path);
    if (!id) {
      lines.push_back("warning: " + path + " does not say which tokenizer made it (no tokenizer / "
                      "tokenizer_hash attributes: prepare it again to have that checked); only its "
                      "vocab_size is checked against the model's");
      continue;
    }
    const std::string data_side = path + " was made by the " + id->name + " tokenizer (tokenizer_hash " +
                                  id->hash + ")";
    if (id->name == "byte" && model_vocab != tok::kVocabSize)
      throw UserError(data_side + ", but the model's vocab_size is " + std::to_string(model_vocab) +
                      ", not the byte tokenizer's " + std::to_string(tok::kVocabSize) +
                      " (prepare the data with scripts/sft_prepare_hf.py --tokenizer and the model's tokenizer)");
    if (model_files.empty()) {
      lines.push_back("tokenizer: " + path + ": " + id->name + " " + id->hash +
                      (model_dir.empty() ? "" : " (" + model_dir + " carries no tokenizer files to compare)"));
      continue;
    }
    const TokenizerFiles* match = nullptr;
    for (const auto& t : model_files)
      if (t.hash == id->hash) match = &t;
    if (!match)
      throw UserError(data_side + ", but the model directory " + model_dir + "'s tokenizer (" +
                      model_files.front().files + ") hashes to " + model_files.front().hash +
                      ": data and model use different tokenizers (prepare the data with "
                      "scripts/sft_prepare_hf.py --tokenizer " + model_dir + ")");
    lines.push_back("tokenizer: " + path + ": " + id->name + " " + id->hash + " = " + model_dir + "/" +
                    match->files);
  }
  return lines;
}

}  // namespace sftdp::data
