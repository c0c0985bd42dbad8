// Must not compile: the launcher knows nothing of the trainer's parts.
#include "ddp/comm/dist_env.h"
