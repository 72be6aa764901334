// src/data/data_file.h — one opened and validated SPEC §4 file: its dataset handles, row count
// and vocab_size attribute. Opening checks layout, types, ranks, shapes, T and vocab_size and
// throws UserError "<path>: <reason>"; the values themselves are checked when rows are read.
#pragma once
#include <cstdint>
#include <string>

#include "h5/h5.h"

namespace sftdp::data {

struct DataFile {
  std::string path;
  h5::Handle file;  // declared first: the datasets below close before the file
  h5::Handle inputs, targets, loss_weights;  // int32, int32, float32 [rows, T]
  h5::Handle segment_ids, positions;         // int32 [rows, T]; invalid() when the file has none
  int64_t rows = 0;
  int T = 0;
  int64_t vocab_size = 0;  // the file's root attribute, <= the model's
};

// [in] path, T (max_target_length), model_vocab_size. Throws UserError on any layout problem.
DataFile open_data_file(const std::string& path, int T, int64_t model_vocab_size);

}  // namespace sftdp::data
