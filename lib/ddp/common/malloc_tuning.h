#pragma once
// glibc malloc settings for a training process. See Note [Malloc churn].

namespace ddp {

/// Keeps freed tensor memory in the process for the next step instead of returning it to the
/// kernel. Call first thing in main(), before any threads start.
void keep_freed_memory_for_reuse();

/// Returns the heap's free memory to the kernel once, after setup, whose transients (a model's
/// build, its flat copies, a checkpoint's reads) steps would not reuse.
void return_setup_memory();

}  // namespace ddp
