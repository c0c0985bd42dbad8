#pragma once
// The console when the ranks are threads of one process (Note [Ranks as threads]): what a process
// per rank would show. Rank 0 says everything; the other ranks only their warnings and errors, each
// line naming its rank.

namespace ddp {

/// Makes the default logger filter by the calling thread's rank (set_log_rank): every level from
/// rank 0 and from threads that are no rank's; warnings and errors only from the others, as
/// "rank N: ...". Call before the rank threads start.
void log_by_rank_thread();

/// Tells the log which rank the calling thread is.
void set_log_rank(int rank);

}  // namespace ddp
