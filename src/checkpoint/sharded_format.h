// src/checkpoint/sharded_format.h — private to src/checkpoint: what the sharded writer and reader
// agree on (SPEC §5, issue 36): file and group names, the format version, how a rank's runs of the
// flat layout split into per-tensor pieces, and the directory fsync.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "sftdp/check.h"
#include "sftdp/checkpoint.h"
#include "sftdp/model.h"

namespace sftdp::checkpoint::detail {

inline constexpr int kShardedFormatVersion = 2;
inline constexpr const char* kIndexName = "index.h5";
inline constexpr const char* kShardGroups[kGroups] = {"params", "m", "v"};

inline std::string shard_name(int rank) { return "shard_" + std::to_string(rank) + ".h5"; }
// A piece's dataset in its shard file's group: "<tensor>@<start>" (a tensor name has no '@' or '/').
inline std::string piece_name(const std::string& tensor, size_t start) {
  return tensor + "@" + std::to_string(start);
}

// Elements [start, start + count) of tensor `tensor`, at `local` in the rank's concatenated data.
struct Piece {
  size_t tensor = 0, start = 0, count = 0, local = 0;
};

// The runs cut at tensor boundaries, in order. The layout may pad between tensors (ZeRO units align
// them): floats outside every tensor are in the runs' data but in no piece.
inline std::vector<Piece> pieces_of(const model::ParamLayout& layout, const std::vector<Run>& runs) {
  std::vector<Piece> out;
  std::vector<size_t> order(layout.tensors.size());  // tensors by offset (layout order is SPEC order)
  for (size_t t = 0; t < order.size(); ++t) order[t] = t;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return layout.tensors[a].offset < layout.tensors[b].offset; });
  size_t local = 0;
  for (const auto& r : runs) {
    SFTDP_ASSERT(r.begin + r.count <= layout.total, "a checkpoint run beyond the layout");
    const size_t end = r.begin + r.count;
    // The first tensor ending after r.begin (tensors are in offset order).
    auto it = std::upper_bound(order.begin(), order.end(), r.begin, [&](size_t at, size_t t) {
      return at < layout.tensors[t].offset + layout.tensors[t].numel;
    });
    for (; it != order.end() && layout.tensors[*it].offset < end; ++it) {
      const auto& info = layout.tensors[*it];
      const size_t lo = std::max(r.begin, info.offset), hi = std::min(end, info.offset + info.numel);
      if (lo < hi) out.push_back({*it, lo - info.offset, hi - lo, local + (lo - r.begin)});
    }
    local += r.count;
  }
  return out;
}

// fsync(2) of a directory: makes the renames in it durable. Dies (exit 1) on failure.
inline void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    die_internal("POSIX", "fsync", "cannot write checkpoint in " + dir + ": " + std::strerror(err) + " (errno " +
                                       std::to_string(err) + ")",
                 __FILE__, __LINE__);
  }
  ::close(fd);
}

}  // namespace sftdp::checkpoint::detail
