#pragma once
// Encoding many lines on every core: lines are cut into chunks of about 256 KiB, which the
// threads take in turn; the chunks' ids are kept in the lines' order, so the result does not
// depend on the number of threads.

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "ddp/text/text_tokenizer.h"

namespace ddp {

/// The ids of `lines`, each line as its line-start id then its pieces (Note [Lines as documents]),
/// grouped in chunks in the lines' order. `progress(bytes encoded so far)` is called from the
/// calling thread about once a second. An error in any thread, or one `progress` throws (a stop
/// request), stops the others after their chunk and is rethrown.
std::vector<std::vector<uint32_t>> encode_lines(const TextTokenizer& tokenizer, const std::vector<std::string_view>& lines,
                                                int threads,
                                                const std::function<void(int64_t)>& progress = {});

}  // namespace ddp
