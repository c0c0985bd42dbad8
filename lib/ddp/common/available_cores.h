#pragma once
// CPU cores this process may run on: the launcher splits them among its workers, ddp-train among
// its rank threads.

namespace ddp {

/// CPU cores this process may run on (its affinity mask).
int available_cores();

}  // namespace ddp
