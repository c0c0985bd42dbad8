#include "ddp/text/tokenizer_ids.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/text/sentencepiece_plugin.h"

namespace ddp {

void write_tokenizer_ids(const std::string& dir, const std::string& shown_as) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(dir) / "config.json", tokenizer_path = fs::path(dir) / "tokenizer.model";
  std::error_code error;
  if (!fs::is_regular_file(config_path, error) || !fs::is_regular_file(tokenizer_path, error)) return;
  std::unique_ptr<TextTokenizer> tokenizer;
  try {
    tokenizer = load_sentencepiece(tokenizer_path.string());
  } catch (const UserError& e) {
    const std::string shown = shown_as.empty() ? dir : shown_as;
    std::string reason = e.what();  // it names the file where it is read, which `shown` stands for
    for (auto at = reason.find(dir); !shown_as.empty() && at != std::string::npos;
         at = reason.find(dir, at + shown.size()))
      reason.replace(at, dir.size(), shown);
    spdlog::warn("{}/config.json: its bos_token_id and eos_token_id are not the tokenizer's, which does not load ({})",
                 shown, reason);
    return;
  }
  nlohmann::json config = nlohmann::json::parse(read_whole_file(config_path.string()), nullptr, false);
  if (!config.is_object()) return;  // written by save_extras a moment ago
  // A piece the tokenizer lacks is null, not left to a family's default (GPT-2's 50256) or the
  // starting model's, which name another tokenizer's piece.
  for (const auto& [key, id] : {std::pair{"bos_token_id", tokenizer->bos_id()}, {"eos_token_id", tokenizer->eos_id()}})
    config[key] = id >= 0 ? nlohmann::json(id) : nlohmann::json(nullptr);
  write_file_atomically(config_path.string(), config.dump(2) + "\n");
}

}  // namespace ddp
