// The man page and the bash completion are generated from the launcher's declarations: every
// option appears in both, and bash's completion function, sourced from the generated file, offers
// what the declarations say.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "ddp/launch/launch_options.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

std::string generated(const std::string& relative) { return std::string(DDP_BIN_DIR) + "/../share/" + relative; }

// roff spells each '-' as "\-".
std::string as_roff(std::string text) {
  std::string out;
  for (char c : text) out += c == '-' ? std::string("\\-") : std::string(1, c);
  return out;
}

// What bash's completion offers for `line` (the cursor at its end), one word a line, sorted.
std::vector<std::string> complete(const std::string& line) {
  auto r = run_command({"bash", "--norc", "-c",
                        "source \"$0\"; COMP_LINE=\"$1\"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<<\"$1\"; "
                        "COMP_CWORD=${#COMP_WORDS[@]}; _ddprun; printf '%s\\n' \"${COMPREPLY[@]}\"",
                        generated("bash-completion/completions/ddprun"), line});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> words;
  std::istringstream in(r.out);
  for (std::string word; std::getline(in, word);)
    if (!word.empty()) words.push_back(word);
  std::sort(words.begin(), words.end());
  return words;
}

}  // namespace

TEST_CASE("every launcher option is in ddprun(1) and the bash completion", "[launch][docs]") {
  std::string man = read_file(generated("man/man1/ddprun.1"));
  std::string completion = read_file(generated("bash-completion/completions/ddprun"));
  CHECK_THAT(man, Contains(".TH DDPRUN 1") && Contains(".SH OPTIONS") && Contains(".SH ENVIRONMENT"));
  for (const auto& option : ddp::launcher_option_reference())
    for (const auto& name : option.names) {
      CHECK_THAT(man, Contains("\\fB" + as_roff(name) + "\\fR"));
      CHECK_THAT(completion, Contains(" " + name + " ") || Contains("(" + name + " ") || Contains(" " + name + ")"));
    }
  std::string trainer_man = read_file(generated("man/man1/ddp-train.1"));
  for (const char* name : {"--set", "--rank", "--world-size", "--print-config"})
    CHECK_THAT(trainer_man, Contains("\\fB" + as_roff(name) + "\\fR"));
}

TEST_CASE("ddprun(1) lists every exit status the launcher gives and has examples that parse", "[launch][docs]") {
  std::string man = read_file(generated("man/man1/ddprun.1"));
  for (const char* status : {"0", "1", "2", "74", "130", "143"}) CHECK_THAT(man, Contains(std::string(".B ") + status + "\n"));
  auto examples = man.find(".SH EXAMPLES");
  REQUIRE(examples != std::string::npos);
  CHECK_THAT(man.substr(examples), Contains("ddprun \\-\\-nproc\\-per\\-node 2") && Contains("DDPRUN_PYTHON"));
}

TEST_CASE("ddp-generate(1), ddp-tokenize(1), ddp-export(1) and ddp-report(1) name every option that the programs' --help lists", "[launch][docs]") {
  for (std::string program : {"ddp-generate", "ddp-tokenize", "ddp-export", "ddp-report"}) {
    auto help = run_command({bin(program), "--help"});
    REQUIRE(help.exit_code == 0);
    std::string man = read_file(generated("man/man1/" + program + ".1"));
    INFO(program << " --help:\n" << help.out);
    CHECK_THAT(man, Contains(".SH SYNOPSIS") && Contains(".SH OPTIONS") && Contains(".SH EXIT STATUS"));
    int options = 0;
    std::istringstream words(help.out);
    for (std::string word; words >> word;) {  // "-o,--output", "--seed", "(instead of --prompt)"...
      for (std::size_t at = word.find("--"); at != std::string::npos; at = word.find("--", at + 2)) {
        std::size_t end = word.find_first_not_of("abcdefghijklmnopqrstuvwxyz-", at + 2);
        std::string name = word.substr(at, end == std::string::npos ? end : end - at);
        ++options;
        CHECK_THAT(man, Contains("\\fB" + as_roff(name) + "\\fR"));
        if (end == std::string::npos) break;
        at = end - 2;
      }
    }
    CHECK(options >= (program == "ddp-report" || program == "ddp-export" ? 3 : 10));  // the help was read
  }
}

TEST_CASE("bash completes ddprun's options, their values, config keys and their choices", "[launch][docs]") {
  CHECK(complete("ddprun --nproc-per") == std::vector<std::string>{"--nproc-per-node"});
  CHECK(complete("ddprun --rdzv-backend ") == std::vector<std::string>{"c10d", "static"});
  CHECK(complete("ddprun --nproc-per-node ") == std::vector<std::string>{"auto", "cpu", "gpu"});
  auto optim = complete("ddprun --set opt");
  REQUIRE_FALSE(optim.empty());
  for (const auto& word : optim) CHECK(word.rfind("optim.", 0) == 0);
  CHECK(std::count(optim.begin(), optim.end(), "optim.lr=") == 1);
  // After '=' readline replaces only what follows it: the choices come bare.
  auto names = complete("ddprun configs/x.yaml --set optim.name=");
  CHECK(std::count(names.begin(), names.end(), "adamw") == 1);
  CHECK(complete("ddprun --set sampler.shuffle=t") == std::vector<std::string>{"true"});
  CHECK(complete("ddp-train c.yaml --set train.epo") == std::vector<std::string>{"train.epochs="});
  // Each program its own options: ddp-train's are not the launcher's.
  CHECK(complete("ddp-train c.yaml --print") == std::vector<std::string>{"--print-config"});
  CHECK(complete("ddp-train c.yaml --nproc").empty());
  // After `--`, commands.
  auto commands = complete("ddprun -- sh");
  CHECK(std::count(commands.begin(), commands.end(), "sh") >= 1);  // once per PATH directory that has it
}

TEST_CASE("ddp-docs --help prints its usage and writes nothing, and an option it lacks is refused, never taken for a "
          "directory",
          "[launch][docs]") {
  TempDir dir;
  auto help = run_shell("cd " + dir.path() + " && " + bin("ddp-docs") + " --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Contains("usage: ddp-docs OUTPUT_DIR"));
  auto bogus = run_shell("cd " + dir.path() + " && " + bin("ddp-docs") + " --out");
  CHECK(bogus.exit_code == 2);
  CHECK_THAT(bogus.err, Contains("usage: ddp-docs OUTPUT_DIR"));
  CHECK(std::filesystem::is_empty(dir.path()));
}

}  // namespace DDP_TEST_FILE
