// Must not compile: common is the bottom of the stack (tests/CMakeLists.txt, boundary tests).
#include "ddp/config/config_schema.h"
