#include "generate_options.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "ddp/common/cli_values.h"
#include "ddp/common/version.h"

namespace ddp {

void declare_generate_options(CLI::App& app, GenerateArguments& args) {
  app.add_option("run", args.run, "The run directory (config.yaml and model.pt), or a model.pt")->required();
  app.add_option("--config", args.config, "The config whose model: section built model.pt (default: the run's)")
      ->check(not_empty());
  auto* prompt = app.add_option("--prompt", args.prompt,
                 "Text to continue: through the tokenizer, or one token per byte (byte-level models); default: a new "
                 "line");
  app.add_option("--tokenizer", args.tokenizer,
                 "The SentencePiece model the run's tokens were made with (default: tokenizer.model in the run "
                 "directory, or beside the run's data.path, as ddp-tokenize leaves it)")
      ->check(not_empty());
  app.add_option("--prompt-ids", args.prompt_ids, "Token ids to continue, separated by spaces (instead of --prompt)")
      ->excludes(prompt);
  app.add_option("--tokens", args.sampling.tokens, "New tokens to draw")->transform(integer_in(0, 1000000))
      ->capture_default_str();
  app.add_option("--temperature", args.sampling.temperature, "Below 1 sharper, above 1 flatter; 0: most likely token")
      ->check(number_in(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--top-k", args.sampling.top_k, "Draw among the k most likely tokens; 0: among all")
      ->transform(integer_in(0, 1000000000))
      ->capture_default_str();
  app.add_option("--seed", args.sampling.seed, "The same seed gives the same text")
      ->transform(integer_in(0, std::numeric_limits<long long>::max(), /*in_help=*/false))
      ->capture_default_str();
  app.add_flag("--ids", args.ids, "Print token ids, one per line, instead of text");
  app.set_version_flag("--version", version_line(), "Print the versions this binary was built with");
}

}  // namespace ddp
