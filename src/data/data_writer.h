// src/data/data_writer.h — writes RowSets as SPEC §4 files, atomically: the data goes to a
// temporary name in the same directory, which is renamed to `path` only once complete.
#pragma once
#include <string>

#include "data/prepare.h"
#include "data/tokenizer_identity.h"

namespace sftdp::data {

// [in] path, rows ([rows, T] each; /segment_ids and /positions only when rows.packed),
// vocab_size and tokenizer (the root attributes vocab_size, tokenizer and tokenizer_hash; the
// latter two left out when tokenizer.name is empty). Creates missing parent directories. An unwritable location is
// a UserError; HDF5 failing afterwards is an internal error.
void write_data_file(const std::string& path, const RowSet& rows, int vocab_size,
                     const TokenizerIdentity& tokenizer = {});

}  // namespace sftdp::data
