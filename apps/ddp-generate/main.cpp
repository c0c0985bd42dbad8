// ddp-generate: text from a language model that ddprun trained (gpt, llama). Reads the run's
// config.yaml (the model's shape) and model.pt (its weights), then samples after a prompt, printing
// as it goes: through the SentencePiece tokenizer the run's tokens were made with, or as bytes.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/run_main.h"
#include "ddp/common/worker_contract.h"
#include "ddp/config/config_keys.h"
#include "ddp/loop/prior_run.h"
#include "ddp/loop/train_config.h"
#include "ddp/model/token_sampler.h"
#include "ddp/model/token_stepper.h"
#include "ddp/text/sentencepiece_plugin.h"
#include "generate_options.h"
#include "tool_command_line.h"

namespace {

constexpr int64_t kByteVocabulary = 256;

// Decoded text as its bytes, NULs too (a byte piece <0x00>): fputs would stop at the first.
void print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// What was written so far, out; a full disk or a closed terminal is said (exit 74), not ignored.
void flush_output() {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return;
  const int error = errno != 0 ? errno : EIO;  // a write before the flush failed, and errno moved on
  ddp::throw_output_error(std::string("cannot write the sample to standard output: ") + std::strerror(error), error);
}

// RUN is a run directory or its model.pt; the config is the run's config.yaml unless --config names one.
std::pair<std::string, std::string> model_and_config(const ddp::GenerateArguments& args) {
  namespace fs = std::filesystem;
  bool is_dir = fs::is_directory(args.run);
  std::string model = is_dir ? (fs::path(args.run) / "model.pt").string() : args.run;
  std::string config = !args.config.empty() ? args.config : (fs::path(model).parent_path() / "config.yaml").string();
  if (!fs::exists(model))
    throw ddp::FileError(model + ": no such file (RUN is a run directory holding model.pt, or a model.pt; a run "
                                 "writes model.pt when it finishes)");
  // A training checkpoint (step_N.pt beside its step_N.json manifest) holds the optimizer and
  // progress as well, in a layout of ddprun's own, and may be one shard of many. Said before its
  // directory's missing config.yaml, which is not the cause.
  static const std::regex kCheckpoint(R"((step_\d+)(\.common|\.shard-\d+-of-\d+)?\.pt)");
  std::smatch step;
  const std::string file = fs::path(model).filename().string();
  if (std::regex_match(file, step, kCheckpoint) &&
      fs::exists(fs::path(model).parent_path() / (step[1].str() + ".json")))
    throw ddp::UserError(model + " is a training checkpoint, not a model.pt: `ddp-export RUN_DIR --checkpoint " +
                         model + "` writes its weights as one, which ddp-generate reads");
  if (!fs::exists(config))
    throw ddp::FileError(config + ": no such file (the run's config.yaml says the model's shape; --config names "
                                  "another)");
  return {model, config};
}

// Weights of the same shapes load into a model of another n_head (or dropout, bias-free layers of
// another kind...) and sample nonsense without a word: a --config's model: section must be that of
// model.pt's run where its config.yaml is beside it.
void check_same_model(const std::string& model_path, const std::string& config_path, const ddp::TrainConfig& config) {
  namespace fs = std::filesystem;
  std::string own = (fs::path(model_path).parent_path() / "config.yaml").string();
  if (!fs::exists(own) || fs::equivalent(own, config_path)) return;
  std::ifstream in(own);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto changes = ddp::model_changes(text, ddp::to_yaml(config));
  if (!changes.empty())
    throw ddp::UserError("--config: " + config_path + " builds another model than " + model_path + " was trained as (" +
                         ddp::describe_changes(changes) + ", against " + own +
                         "): its weights fit, but would sample nonsense; leave out --config, or give the run's model "
                         "settings");
}

std::vector<int64_t> prompt_tokens(const ddp::GenerateArguments& args, bool has_prompt_ids) {
  std::vector<int64_t> tokens;
  if (has_prompt_ids) {
    std::istringstream in(args.prompt_ids);
    std::string word;
    while (in >> word) {
      try {
        std::size_t used = 0;
        tokens.push_back(std::stoll(word, &used));
        if (used != word.size()) throw std::invalid_argument(word);
      } catch (const std::exception&) {
        throw ddp::UserError("--prompt-ids: expected token ids separated by spaces, got '" + word + "'");
      }
    }
    return tokens;
  }
  for (unsigned char byte : args.prompt.empty() ? std::string("\n") : args.prompt) tokens.push_back(byte);
  return tokens;
}

// --tokenizer, else tokenizer.model in the run directory or beside data.path's files; "" for none.
std::string find_tokenizer(const ddp::GenerateArguments& args, const std::string& model_path,
                           const ddp::TrainConfig& config) {
  namespace fs = std::filesystem;
  if (!args.tokenizer.empty()) {
    if (!fs::is_regular_file(args.tokenizer)) throw ddp::FileError(args.tokenizer + ": no such file (--tokenizer)");
    return args.tokenizer;
  }
  for (const std::string& place : {(fs::path(model_path).parent_path() / "tokenizer.model").string(),
                                    config.data.path.empty() ? std::string() : ddp::tokenizer_beside(config.data.path)})
    if (!place.empty() && fs::is_regular_file(place)) return place;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  ddp::ProgramErrors errors;
  errors.program = "ddp-generate";
  errors.failure = "failed";
  return ddp::run_main(errors, [&]() -> int {
    ddp::GenerateArguments args;
    CLI::App app("ddp-generate: sample text from a language model trained by ddprun (model.name: gpt, llama)",
                 "ddp-generate");
    ddp::declare_generate_options(app, args);
    if (!ddp::parse_tool_command_line(app, argc, argv, "ddp-generate")) return ddp::kExitSuccess;
    auto [model_path, config_path] = model_and_config(args);
    ddp::TrainConfig config = ddp::load_train_config(config_path, {});
    config.model.init_from.clear();  // model.pt's weights replace them: never read the run's starting point
    std::shared_ptr<ddp::Model> model = ddp::make_model(config.model);
    if (!model->token_stepper()) {
      // An empty or model-less config gets the default model; saying only "convnet" puzzled.
      const bool named = ddp::config_keys(ddp::read_whole_file(config_path)).contains("model.name");
      throw ddp::UserError(config_path + ": model.name is " + config.model.name +
                           (named ? "" : " (the default: the config sets no model.name)") +
                           "; ddp-generate samples from causal language models (gpt, llama)");
    }
    const int64_t vocab = model->output_width();

    // The weights before the tokenizer: a config that does not fit model.pt is named as that, not
    // as a tokenizer too large for the config's vocabulary.
    try {
      model->load_weights(model_path);
    } catch (const ddp::FileError& e) {
      throw ddp::FileError(std::string(e.what()) + " (is " + model_path + " from the run of " + config_path + "?)");
    }
    check_same_model(model_path, config_path, config);
    const bool has_prompt_ids = app.count("--prompt-ids") > 0;
    const std::string tokenizer_path = find_tokenizer(args, model_path, config);
    std::unique_ptr<ddp::TextTokenizer> tokenizer;
    if (!tokenizer_path.empty()) {
      tokenizer = ddp::load_sentencepiece(tokenizer_path);
      if (tokenizer->vocab_size() > vocab)
        throw ddp::UserError(tokenizer_path + " has " + std::to_string(tokenizer->vocab_size()) +
                             " pieces, more than the model's " + std::to_string(vocab) +
                             " (model.vocab_size): it is not the tokenizer this model was trained with");
    } else if (vocab != kByteVocabulary && args.ids && !has_prompt_ids) {  // ids out, but text in
      throw ddp::UserError("--ids: model.vocab_size is " + std::to_string(vocab) + " (" + config_path +
                           "), so its tokens are not bytes, and with no tokenizer.model in the run directory or beside "
                           "data.path the prompt cannot be made into tokens: give it as --prompt-ids (token ids "
                           "separated by spaces), or name the tokenizer with --tokenizer");
    } else if (vocab != kByteVocabulary && !(args.ids && has_prompt_ids)) {  // text in or out needs one
      throw ddp::UserError(config_path + ": model.vocab_size is " + std::to_string(vocab) +
                           ", so its tokens are not bytes, and no tokenizer.model is in the run directory or beside "
                           "data.path: --tokenizer names the one its tokens were made with (--ids prints token ids, "
                           "--prompt-ids takes them)");
    }
    std::vector<int64_t> prompt = tokenizer && !has_prompt_ids ? ddp::encode_text(*tokenizer, args.prompt)
                                                              : prompt_tokens(args, has_prompt_ids);  // even empty
    for (int64_t id : prompt)  // before any is printed
      if (id < 0 || id >= vocab)
        throw ddp::UserError("--prompt-ids: " + std::to_string(id) + " is outside the model's vocabulary (ids 0 to " +
                             std::to_string(vocab - 1) + ")");
    if (prompt.empty()) throw ddp::UserError("--prompt-ids: no token ids given");

    if (tokenizer) args.sampling.id_limit = tokenizer->vocab_size();
    std::optional<ddp::StreamDecoder> text;
    if (tokenizer && !args.ids) {
      text.emplace(*tokenizer);
      std::string shown;
      for (int64_t id : prompt) shown += text->push(id);
      print(shown);
    } else if (!args.ids) {
      for (int64_t token : prompt) std::putchar(static_cast<int>(token));
    }
    auto emit = [&](int64_t token) {
      if (args.ids) {
        std::printf("%lld\n", static_cast<long long>(token));
      } else if (text) {
        print(text->push(token));
      } else {
        std::putchar(static_cast<int>(token));
      }
      flush_output();
    };
    ddp::sample_tokens(*model, prompt, args.sampling, emit);
    if (text) print(text->finish());
    if (!args.ids) std::putchar('\n');
    flush_output();
    return ddp::kExitSuccess;
  });
}
