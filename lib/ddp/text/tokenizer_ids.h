#pragma once
// A model directory's config.json says which ids start and end a text (bos_token_id,
// eos_token_id), as transformers' generate reads them; a family's own defaults (GPT-2's 50256) are
// another tokenizer's, and may lie outside a vocabulary trained here.

#include <string>

namespace ddp {

/// Sets DIR/config.json's bos_token_id and eos_token_id to those of DIR/tokenizer.model (through the
/// plugin: Note [SentencePiece's protobuf]), where both files are there; warns, leaving config.json
/// as it is, when the tokenizer does not load, naming the directory as `shown_as` (where a staging
/// directory will be: "" for DIR itself).
void write_tokenizer_ids(const std::string& dir, const std::string& shown_as = "");

}  // namespace ddp
