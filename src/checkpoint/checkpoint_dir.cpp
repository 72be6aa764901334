// src/checkpoint/checkpoint_dir.cpp — newest() and prune(): the checkpoints of a directory are
// exactly the regular files named step_<S>.h5 with S a plain decimal (no sign, no leading zeros),
// ordered by S as a number. Temporary files (.step_<S>.h5.tmp.<pid>) and anything else are
// never returned and never deleted.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "sftdp/check.h"
#include "sftdp/checkpoint.h"
#include "sftdp/log.h"

namespace sftdp::checkpoint {
namespace {

namespace fs = std::filesystem;

// S of "step_<S>.h5", or nothing for any other name.
std::optional<int64_t> step_of(const std::string& name) {
  static constexpr std::string_view kPrefix = "step_", kSuffix = ".h5";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return std::nullopt;
  const std::string_view digits(name.data() + kPrefix.size(),
                                name.size() - kPrefix.size() - kSuffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;  // not a name we write
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;  // overflow
  return step;
}

struct Listing {
  std::vector<std::pair<int64_t, std::string>> checkpoints;  // (S, path), ascending S
  std::error_code error;                                     // set when dir could not be read
};

// A missing directory holds no checkpoints and is not an error.
Listing list_checkpoints(const std::string& dir) {
  Listing out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    out.error = ec;
    return out;
  }
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto step = step_of(it->path().filename().string());
    std::error_code type_ec;
    if (step && it->is_regular_file(type_ec)) out.checkpoints.emplace_back(*step, it->path().string());
  }
  out.error = ec;
  std::sort(out.checkpoints.begin(), out.checkpoints.end());
  return out;
}

}  // namespace

std::optional<std::string> newest(const std::string& dir) {
  Listing listing = list_checkpoints(dir);
  if (listing.error)
    throw UserError(dir + ": cannot list checkpoints: " + listing.error.message());
  if (listing.checkpoints.empty()) return std::nullopt;
  return std::move(listing.checkpoints.back().second);
}

void prune(const std::string& dir, int64_t keep) {
  if (keep <= 0) return;
  const Listing listing = list_checkpoints(dir);
  // Called on rank 0 alone after a save: a listing or delete failure costs disk space, not
  // correctness, so it warns instead of stopping the run.
  if (listing.error) {
    log::warn("%s: cannot list checkpoints to prune: %s", dir.c_str(),
              listing.error.message().c_str());
    return;
  }
  const size_t n = listing.checkpoints.size();
  if (n <= static_cast<uint64_t>(keep)) return;
  for (size_t i = 0; i < n - static_cast<size_t>(keep); ++i) {
    const std::string& path = listing.checkpoints[i].second;
    std::error_code ec;
    if (!fs::remove(path, ec) && ec)
      log::warn("%s: cannot delete old checkpoint: %s", path.c_str(), ec.message().c_str());
  }
}

}  // namespace sftdp::checkpoint
