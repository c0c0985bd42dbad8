// Must not compile: checkpoints sit below the loop.
#include "ddp/loop/loop_config.h"
