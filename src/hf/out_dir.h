// src/hf/out_dir.h — how the exporters create a directory: out_dir must not exist or be empty; fill()
// writes every file into a temporary sibling directory, which is renamed to out_dir at the end, so
// nothing appears at out_dir unless every file was written (and a failure leaves nothing behind).
// check() runs before the temporary directory is created (input checks that must write nothing).
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace sftdp::hf {

void write_directory(const std::string& out_dir, const std::function<void(const std::filesystem::path& temp)>& fill);
// Copies each file into dir under its own name (tokenizer files into an exported directory).
void copy_into(const std::vector<std::filesystem::path>& files, const std::filesystem::path& dir);

}  // namespace sftdp::hf
