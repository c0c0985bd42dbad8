#pragma once
// One attempt of a launch: this node's workers started, relayed and watched until all exit, the
// rest stopped on the first failure, a signal or (elastic) the end of the round. What it sees
// becomes events of an AttemptState (Note [Attempt states]), which decides.

#include "ddp/launch/attempt_state.h"
#include "ddp/launch/launch_options.h"
#include "ddp/launch/rendezvous.h"

namespace ddp {

class ElasticRendezvous;
class SignalPipe;
class Watchdog;

/// Runs one attempt to its end. `rendezvous` is null for one node that meets through a private
/// FileStore; `elastic` is the same object in an elastic job (then `attempt` is the round, and
/// `restart_count` the failures).
AttemptOutcome run_attempt(const LaunchOptions& options, const WorldLayout& layout, Rendezvous* rendezvous,
                           Watchdog& watchdog, SignalPipe& signals, int attempt, int restart_count,
                           ElasticRendezvous* elastic);

}  // namespace ddp
