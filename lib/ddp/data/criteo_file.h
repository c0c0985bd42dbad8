#pragma once
// Click logs in the layout of Criteo's display-advertising datasets (the Kaggle challenge's
// train.txt, the Terabyte click logs' day_N), data.dataset criteo: one impression per line, 40
// tab-separated fields: the label (1 clicked, 0 not), 13 integer counts (I1..I13) and 26
// categorical values (C1..C26), each an anonymised 32-bit hash in hexadecimal; any field but the
// label may be empty. They are read as DLRM's preprocessing reads them: a count x becomes
// log(1 + max(x, 0)), a missing one 0; a categorical value stays its hash (0 where missing), which
// the model folds into its tables. The features are kept as the model takes them, not normalised.

#include <cstdint>
#include <functional>
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

/// Reads `path` a line at a time, never whole: `impression(label, features)` for each, the 39
/// features as read_criteo_file gives them; throws FileError as it does.
void for_each_impression(const std::string& path, const std::function<void(float label, const double* features)>& impression);

/// read_criteo_file through the node cache in `cache_dir` (node_cache.h): the log is converted once
/// per node, a line at a time, into a sealed cache file from which every rank reads its samples on
/// demand (sample_file.h); only the labels are held in memory, 4 bytes an impression. The Kaggle
/// set's 45 million impressions then cost 14 GB of disk and 180 MB of a rank's memory, not 14 GB.
/// "none" (or a cache that cannot be written) reads the file into memory instead.
Dataset load_criteo_cached(const std::string& path, const std::string& cache_dir);

}  // namespace ddp
