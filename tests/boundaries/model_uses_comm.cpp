// Must not compile: models get cross-rank sums injected (ModelContext), not the communicator.
#include "ddp/comm/dist_config.h"
