#pragma once
// The launcher's main job: rendezvous, start the node's workers, relay their output, watch them,
// and stop the whole group on the first failure or signal.

#include <string>
#include <sys/types.h>

#include "ddp/launch/launch_options.h"

namespace ddp {

/// Runs the whole launch and returns the launcher's exit status: 0 when every worker succeeded,
/// the first failure's exit code (128+N for signal N), or 128+N when the launcher got signal N.
/// Throws UserError for problems found before any worker starts.
int run_launcher(const LaunchOptions& options);

}  // namespace ddp
