// tests/fuzz/replay_main.cpp — the main() of a fuzz target outside libFuzzer (the gcc suite): runs
// LLVMFuzzerTestOneInput once on every file named on the command line, or on every file of every
// directory named (corpus/<target>, regressions/<target>). A crash or sanitizer report fails the
// test like in the fuzzer; a directory without a file is an error (the test would prove nothing).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (!fs::is_directory(arg)) {
      inputs.push_back(arg);
      continue;
    }
    const size_t before = inputs.size();
    for (const auto& entry : fs::directory_iterator(arg))
      if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
        inputs.push_back(entry.path());
    if (inputs.size() == before) {
      std::fprintf(stderr, "error: %s: no inputs to replay\n", argv[i]);
      return 2;
    }
  }
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "error: %s: cannot read\n", path.c_str());
      return 2;
    }
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
    std::printf("replaying %s (%zu bytes)\n", path.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%zu inputs replayed\n", inputs.size());
  return 0;
}
