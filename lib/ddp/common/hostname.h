#pragma once
// This machine's hostname, for the notes that say which machine wrote or holds something.

#include <string>

namespace ddp {

/// gethostname(), or "localhost" when it fails.
std::string hostname();

}  // namespace ddp
