#pragma once
// Click logs in the layout of Criteo's display-advertising datasets (the Kaggle challenge's
// train.txt, the Terabyte click logs' day_N), data.dataset criteo: one impression per line, 40
// tab-separated fields: the label (1 clicked, 0 not), 13 integer counts (I1..I13) and 26
// categorical values (C1..C26), each an anonymised 32-bit hash in hexadecimal; any field but the
// label may be empty. They are read as DLRM's preprocessing reads them: a count x becomes
// log(1 + max(x, 0)), a missing one 0; a categorical value stays its hash (0 where missing), which
// the model folds into its tables. The features are kept as the model takes them, not normalised.

#include <cstdint>
#include <string>

#include "ddp/data/dataset.h"

namespace ddp {

/// Counts and categorical features per impression.
inline constexpr int64_t kCriteoDense = 13;
inline constexpr int64_t kCriteoCategorical = 26;

/// Reads `path`: features float64 [N, 13 + 26], the log counts then the hashes (float64 holds a
/// 32-bit hash exactly); labels float32 [N, 1]. FileError naming the file, the line and the fault:
/// a line without 40 fields (a last line cut short says the file looks truncated), a label other
/// than 0 or 1, a count that is not an integer, a categorical value that is not hexadecimal of at
/// most 8 digits, no lines at all.
Dataset read_criteo_file(const std::string& path);

}  // namespace ddp
