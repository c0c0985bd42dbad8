// Must not compile: data sits below the loop.
#include "ddp/loop/loop_config.h"
