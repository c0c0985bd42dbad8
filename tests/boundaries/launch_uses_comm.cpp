// Must not compile: the launcher knows nothing of the trainer's parts.
#include "ddp/comm/process_group.h"
