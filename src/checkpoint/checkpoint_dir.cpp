// src/checkpoint/checkpoint_dir.cpp — newest(), prune() and load_newest(): the checkpoints of a
// directory are exactly the regular files named step_<S>.h5 with S a plain decimal (no sign, no
// leading zeros), ordered by S as a number. Temporary files (.step_<S>.h5.tmp.<pid>), refused ones
// (step_<S>.h5.corrupt[.<k>]) and anything else are never returned; prune() deletes none of them, and
// remove_unfinished_writes() only the temporary files, at the start of a run.
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

// S of "step_<S>" + suffix, or nothing for any other name.
std::optional<int64_t> step_of(const std::string& name, std::string_view kSuffix = ".h5") {
  static constexpr std::string_view kPrefix = "step_";
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

// A sharded checkpoint's directory name, "step_<S>" (issue 36).
std::optional<int64_t> dir_step_of(const std::string& name) { return step_of(name, ""); }

struct Listing {
  std::vector<std::pair<int64_t, std::string>> checkpoints;  // (S, path), ascending S (a file before a directory)
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
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (const auto step = step_of(name); step && it->is_regular_file(type_ec))
      out.checkpoints.emplace_back(*step, it->path().string());
    else if (const auto dstep = dir_step_of(name); dstep && is_sharded(it->path().string()))
      out.checkpoints.emplace_back(*dstep, it->path().string());  // a directory with its index
  }
  out.error = ec;
  // By S; at equal S the directory (no ".h5") after the file, so it counts as the newer.
  std::sort(out.checkpoints.begin(), out.checkpoints.end(), [](const auto& a, const auto& b) {
    const bool ad = !a.second.ends_with(".h5"), bd = !b.second.ends_with(".h5");
    return a.first != b.first ? a.first < b.first : ad < bd;
  });
  return out;
}

// ".step_<S>.h5.tmp.<pid>" (what AtomicH5Writer names its file before the rename), S and pid decimal.
bool is_unfinished_write(const std::string& name) {
  static constexpr std::string_view kTmp = ".h5.tmp.";
  if (!name.starts_with(".")) return false;
  const size_t at = name.rfind(kTmp);
  if (at == std::string::npos) return false;
  const std::string pid = name.substr(at + kTmp.size());
  const bool digits = !pid.empty() && std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; });
  return digits && step_of(name.substr(1, at + 3 - 1)).has_value();
}

// Where a refused checkpoint goes: a name no listing matches that replaces no existing file.
std::string aside_name(const std::string& path) {
  std::string target = path + ".corrupt";
  std::error_code ec;
  for (int k = 2; fs::exists(target, ec) || fs::is_symlink(target, ec); ++k)
    target = path + ".corrupt." + std::to_string(k);
  return target;
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
    if (is_sharded(path)) {  // its index first: it stops being a checkpoint before its shards go
      fs::remove(fs::path(path) / "index.h5", ec);
      if (!ec) fs::remove_all(path, ec);
    } else {
      fs::remove(path, ec);
    }
    if (ec) log::warn("%s: cannot delete old checkpoint: %s", path.c_str(), ec.message().c_str());
  }
}

int remove_unfinished_writes(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return 0;
  std::vector<fs::path> found;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    const std::string name = it->path().filename().string();
    if (is_unfinished_write(name) && it->is_regular_file(type_ec))
      found.push_back(it->path());
    else if (dir_step_of(name) && it->is_directory(type_ec) && !is_sharded(it->path().string()))
      found.push_back(it->path());  // step_<S>/ without its index: a sharded write that never committed
  }
  if (ec) log::warn("%s: cannot list unfinished checkpoint writes: %s", dir.c_str(), ec.message().c_str());
  int removed = 0;
  for (const fs::path& path : found) {
    std::error_code size_ec, rm_ec;
    uintmax_t bytes = 0;
    if (fs::is_directory(path, size_ec)) {
      for (const auto& e : fs::recursive_directory_iterator(path, size_ec))
        if (std::error_code e_ec; e.is_regular_file(e_ec)) bytes += e.file_size(e_ec);
    } else {
      bytes = fs::file_size(path, size_ec);
      if (size_ec) bytes = 0;
    }
    if (!fs::remove_all(path, rm_ec) || rm_ec) {
      log::warn("%s: cannot delete an unfinished checkpoint write: %s", path.c_str(),
                (rm_ec ? rm_ec.message() : std::string("already gone")).c_str());
      continue;
    }
    ++removed;
    log::info("removed %s (%llu bytes): a checkpoint write that never finished (its writer was killed)",
              path.c_str(), static_cast<unsigned long long>(bytes));
  }
  return removed;
}

std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  Listing listing = list_checkpoints(dir);
  if (listing.error) throw UserError(dir + ": cannot list checkpoints: " + listing.error.message());
  std::vector<std::string> out;
  for (auto it = listing.checkpoints.rbegin(); it != listing.checkpoints.rend(); ++it) out.push_back(it->second);
  return out;
}

std::string move_aside(const std::string& path) {
  const std::string aside = aside_name(path);
  std::error_code ec;
  fs::rename(path, aside, ec);
  if (ec)
    throw UserError(path + " cannot be moved aside to " + aside + " (" + ec.message() +
                    "), so a later prune could keep it and delete good checkpoints: move or delete it, then run again");
  return aside;
}

std::optional<std::string> load_newest(const std::string& dir, const model::ParamLayout& layout,
                                       std::vector<float>& params, std::vector<float>& m,
                                       std::vector<float>& v, TrainState& state) {
  const Listing listing = list_checkpoints(dir);
  if (listing.error)
    throw UserError(dir + ": cannot list checkpoints: " + listing.error.message());
  std::vector<std::pair<std::string, std::string>> refused;  // (path, why), newest first
  for (auto it = listing.checkpoints.rbegin(); it != listing.checkpoints.rend(); ++it) {
    const std::string& path = it->second;
    try {
      load(path, layout, params, m, v, state);
    } catch (const UserError& e) {
      refused.emplace_back(path, e.what());  // "<path>: <what is wrong>"
      continue;
    }
    // Only now, with a checkpoint to resume from, are the refused ones moved: if none loads, the
    // files stay as they were (a changed model config refuses every one of them).
    for (const auto& [bad, why] : refused) {
      const std::string aside = aside_name(bad);
      std::error_code ec;
      fs::rename(bad, aside, ec);
      if (ec)
        throw UserError(why + "; it cannot be moved aside to " + aside + " (" + ec.message() +
                        "), so a later prune could keep it and delete good checkpoints: move or "
                        "delete it, then run again");
      log::warn("%s; resuming from the older %s instead (the refused file is kept as %s)",
                why.c_str(), path.c_str(), aside.c_str());
    }
    return path;
  }
  if (refused.empty()) return std::nullopt;
  if (refused.size() == 1) throw UserError(refused.front().second);
  constexpr size_t kShown = 3;
  std::string msg = "no checkpoint in " + dir + " can be resumed from (" +
                    std::to_string(refused.size()) + " refused): ";
  for (size_t i = 0; i < std::min(refused.size(), kShown); ++i)
    msg += (i > 0 ? "; " : "") + refused[i].second;
  if (refused.size() > kShown)
    msg += "; and " + std::to_string(refused.size() - kShown) + " older ones";
  throw UserError(msg);
}

}  // namespace sftdp::checkpoint
