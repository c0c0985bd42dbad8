// ddprun: launches one worker per GPU or CPU slot with the torchrun environment and supervises them.
#include <fcntl.h>

#include "ddp/common/run_main.h"
#include "ddp/common/worker_contract.h"
#include "ddp/launch/launch_options.h"
#include "ddp/launch/supervisor.h"

int main(int argc, char** argv) {
  // Descriptors 0-2 must be open before anything else opens one: a pipe or socket landing on a
  // closed 0, 1 or 2 would later be overwritten as stdin, stdout or stderr (the kill watchdog's
  // pipe was, when ddprun started with stdin closed).
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd) return ddp::kExitFailure;
  ddp::ProgramErrors errors;
  errors.program = "ddprun";
  return ddp::run_main(errors, [&] {
    auto options = ddp::parse_launch_options(argc, argv);
    if (!options) return static_cast<int>(ddp::kExitSuccess);
    return ddp::run_launcher(*options);
  });
}
