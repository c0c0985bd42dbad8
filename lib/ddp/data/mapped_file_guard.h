#pragma once
// Note [Files shrinking under a mapping]: a read-only mapping of a file that is truncated while it is
// mapped (a shard rewritten in place, a copy still in progress) turns the next read of a page past
// the new end into SIGBUS, and the process dies with no word on which file. The mapped files register
// their ranges here; a SIGBUS inside one prints one line naming that file and its size when mapped,
// and exits with kExitUsage (the data must be fixed first: a restart would read the same file). Any
// other SIGBUS keeps its default action.

#include <cstddef>
#include <string>

namespace ddp {

/// Registers [begin, begin + bytes), the mapping of `path`, for the SIGBUS message; installs the
/// handler on first use. `key` names the file's config key ("data.path").
void guard_mapping(const void* begin, std::size_t bytes, const std::string& path, const std::string& key);

/// Forgets the mapping at `begin` (before it is unmapped).
void unguard_mapping(const void* begin);

}  // namespace ddp
