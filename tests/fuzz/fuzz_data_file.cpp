// tests/fuzz/fuzz_data_file.cpp — fuzzes the SPEC §4 data reader (src/data: Dataset open +
// read_rows). The input does not reach libhdf5 as bytes: it drives a generator that writes a
// well-formed HDF5 file with hostile contents (datasets present or absent, links that dangle,
// groups where datasets belong, dtypes, ranks, shapes, chunking, storage that cannot be read, the
// vocab_size attribute's type, shape and value, NaN/Inf/negative/out-of-range values). Our reader
// must answer with a UserError or with rows that honour its contract, close every HDF5 id, and
// never crash, hang or trip a sanitizer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sftdp/check.h"
#include "sftdp/data.h"

namespace {

using sftdp::fuzz::ByteReader;

constexpr const char* kColumns[5] = {"/inputs", "/targets", "/loss_weights", "/segment_ids",
                                     "/positions"};

// One column of one file: absent, a dangling soft link, a group, or a dataset of a picked type
// and shape (mostly the right one) whose values are mostly in range.
void write_column(ByteReader& in, hid_t file, int col, bool required, int64_t rows, int T,
                  int vocab, int max_pos) {
  const char* name = kColumns[col];
  const bool is_float = col == 2;
  const uint32_t mode = in.pick(12);
  if (mode == 11 || (!required && mode < 6)) return;  // absent (optional columns: mostly)
  switch (mode) {
    case 10: H5Lcreate_soft("/nowhere", file, name, H5P_DEFAULT, H5P_DEFAULT); return;
    case 9: H5Gclose(sftdp::fuzz::h5_ok(H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT,
                                                    H5P_DEFAULT), "H5Gcreate2")); return;
    default: break;
  }
  const hid_t type = sftdp::fuzz::pick_type(in, is_float ? H5T_IEEE_F32LE : H5T_STD_I32LE);
  std::vector<hsize_t> dims = {static_cast<hsize_t>(rows), static_cast<hsize_t>(T)};
  switch (in.pick(8)) {
    case 4: dims.pop_back(); break;                 // rank 1
    case 5: dims.push_back(1 + in.pick(2)); break;  // rank 3
    case 6: dims.clear(); break;                    // scalar
    case 7: {                                       // one dimension off by one
      hsize_t& d = dims[in.pick(2)];
      d = in.flag() ? d + 1 : (d > 0 ? d - 1 : d);
      break;
    }
    default: break;
  }
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  const int64_t hi = col <= 1 ? vocab - 1 : col == 3 ? 4 : max_pos - 1;
  std::vector<double> values(n);
  const bool hostile = in.pick(4) == 3;  // otherwise every value is legal
  for (hsize_t i = 0; i < n; ++i) {
    if (is_float)
      values[i] = hostile ? in.interesting_float() : static_cast<double>(in.pick(3));
    else
      values[i] = static_cast<double>(hostile ? in.interesting_int(hi)
                                              : in.range(0, std::max<int64_t>(hi, 0)));
  }
  const bool chunked = in.pick(4) == 3, missing_external = in.pick(16) == 15;
  sftdp::fuzz::write_dataset(file, name, type, dims, values, chunked, missing_external);
}

void write_vocab_attr(ByteReader& in, hid_t file, int model_vocab) {
  const double value = in.pick(4) == 3 ? static_cast<double>(in.interesting_int(model_vocab))
                                       : static_cast<double>(model_vocab - in.pick(model_vocab));
  switch (in.pick(10)) {
    case 9: return;  // missing
    case 8: sftdp::fuzz::write_string_attr(file, "vocab_size", "50257", in.flag()); return;
    case 7: sftdp::fuzz::write_numeric_attr(file, "vocab_size", H5T_STD_I64LE, {}); return;
    case 6: sftdp::fuzz::write_numeric_attr(file, "vocab_size", H5T_STD_I64LE, {value, value});
      return;
    default:
      sftdp::fuzz::write_numeric_attr(file, "vocab_size", sftdp::fuzz::pick_type(in, H5T_STD_I64LE),
                                      {value});
  }
}

// The rows a read honours: token ids in [0, vocab), weights finite >= 0, segment ids >= 0,
// positions in [0, max_pos).
void check_batch(const sftdp::data::Batch& b, size_t want_rows, int T, int vocab, int max_pos) {
  const size_t n = want_rows * static_cast<size_t>(T);
  bool ok = b.B == static_cast<int>(want_rows) && b.T == T && b.inputs.size() == n &&
            b.targets.size() == n && b.loss_weights.size() == n &&
            (b.segment_ids.empty() || b.segment_ids.size() == n) &&
            (b.positions.empty() || b.positions.size() == n);
  for (size_t i = 0; ok && i < n; ++i) {
    ok = b.inputs[i] >= 0 && b.inputs[i] < vocab && b.targets[i] >= 0 && b.targets[i] < vocab &&
         std::isfinite(b.loss_weights[i]) && b.loss_weights[i] >= 0 &&
         (b.segment_ids.empty() || b.segment_ids[i] >= 0) &&
         (b.positions.empty() || (b.positions[i] >= 0 && b.positions[i] < max_pos));
  }
  if (!ok) {
    std::fprintf(stderr, "fuzz_data_file: read_rows returned values outside its contract\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return -1;
  sftdp::fuzz::internal_errors_abort();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  ByteReader in(data, size);
  const int T = static_cast<int>(in.range(1, 6));
  const int vocab = static_cast<int>(in.range(1, 40));
  // Dataset's precondition (sft_train's config check guarantees it): rows of T tokens fit the
  // position table, so the implicit positions 0..T-1 of a file without /positions are legal. Once
  // drawn from [1, 8) alone, a T above it made such rows "break" the contract (a harness bug).
  const int max_pos = static_cast<int>(in.range(T, 8));
  const int n_files = static_cast<int>(in.range(1, 2));

  std::vector<std::string> paths;
  for (int f = 0; f < n_files; ++f) {
    paths.push_back(sftdp::fuzz::scratch_path(f == 0 ? "data0" : "data1"));
    const int64_t rows = in.pick(8) == 7 ? 0 : in.range(1, 5);
    const int file_T = in.pick(8) == 7 ? static_cast<int>(in.range(1, 7)) : T;
    const hid_t file = sftdp::fuzz::create_file(paths.back());
    for (int col = 0; col < 5; ++col) write_column(in, file, col, col < 3, rows, file_T, vocab, max_pos);
    write_vocab_attr(in, file, vocab);
    H5Fclose(file);
  }

  try {
    sftdp::data::Dataset dataset(paths, T, vocab, max_pos);
    if (dataset.rows() < 1 || dataset.T() != T) std::abort();
    for (int reads = static_cast<int>(in.range(1, 3)); reads > 0; --reads) {
      std::vector<int64_t> rows(in.range(1, 6));
      for (auto& r : rows) r = in.pick(static_cast<uint32_t>(dataset.rows()));
      sftdp::data::Batch batch;
      try {
        dataset.read_rows(rows, batch);
        check_batch(batch, rows.size(), T, vocab, max_pos);
      } catch (const sftdp::UserError&) {
      }
    }
  } catch (const sftdp::UserError&) {
  }
  sftdp::fuzz::require_no_open_h5_objects("fuzz_data_file");
  for (const auto& p : paths) std::remove(p.c_str());
  return 0;
}
