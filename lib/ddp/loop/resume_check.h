#pragma once
// Whether a checkpoint may be resumed by this run: the same config where it decides what is trained,
// the same training data, and the same samples in each optimizer step. A resume that would change
// any of them trains something else without a word (a weight decay never asked for, windows repeated
// or skipped, a global batch twice the size), so it is refused, naming what differs and a fix that,
// followed, resumes with the same samples per step.

#include <cstdint>
#include <string>

#include "ddp/checkpoint/checkpointer.h"
#include "ddp/loop/global_batch.h"
#include "ddp/loop/train_config.h"

namespace ddp {

/// "" when the checkpoint's recorded config and data fingerprint (its manifest's, read_run_identity)
/// fit this run's, else the refusal: the keys that decide what is trained and differ, or the data
/// files that changed. Checkpoints that record neither pass.
std::string run_identity_refusal(const RunIdentity& saved, const RunIdentity& now, const std::string& source);

/// Throws UserError, with a fix, unless `saved`'s steps are this run's: the same samples in each
/// optimizer step and a position that falls on this run's micro-batches (Note [Resume at another
/// world size]). `source` names the checkpoint.
void check_resume_layout(const TrainProgress& saved, const StepShape& now, const TrainConfig& config,
                         const std::string& source);

}  // namespace ddp
