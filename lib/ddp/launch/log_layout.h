#pragma once
// Where the workers' logs go (Note [Log layout] in attempt.cpp): the directories, made with a
// message that names what stands in the way.

#include <string>

namespace ddp {

/// Creates a log directory and its parents; UserError naming the cause.
void make_log_directory(const std::string& path);

/// LOG_DIR under --redirects/--tee: `log_dir`, or without it a fresh $TMPDIR/ddprun_XXXXXX; says
/// where the logs of run `run_id` go.
std::string make_torchrun_log_dir(const std::string& log_dir, const std::string& run_id);

}  // namespace ddp
