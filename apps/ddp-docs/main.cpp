// ddp-docs OUTPUT_DIR: writes the man pages and the bash completion from the declarations that the
// parsers use, so that neither can drift from the programs. Run by the build; not installed.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "bash_completion.h"
#include "ddp/common/version.h"
#include "ddp/launch/launch_options.h"
#include "ddp/loop/train_config.h"
#include "generate_options.h"
#include "man_page.h"
#include "report_options.h"
#include "tokenize_options.h"
#include "export_options.h"
#include "trainer_options.h"

int main(int argc, char** argv) {
  const std::string usage = "usage: ddp-docs OUTPUT_DIR (writes man/man1/*.1 and bash-completion/completions/* there)\n";
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << usage;
    return 0;
  }
  if (argc != 2 || argv[1][0] == '-') {  // an option it does not have, never a directory named like one
    std::cerr << usage;
    return 2;
  }
  const std::filesystem::path out = argv[1];
  auto options = ddp::launcher_option_reference();
  ddp::TrainerArguments args;
  ddp::WorkerIdentity identity;
  CLI::App trainer("ddp-train", "ddp-train");
  ddp::declare_trainer_options(trainer, args, identity);
  auto trainer_options = ddp::option_reference(trainer);
  auto sections = ddp::config_reference();
  ddp::GenerateArguments generate_args;
  CLI::App generate("ddp-generate", "ddp-generate");
  ddp::declare_generate_options(generate, generate_args);
  ddp::ReportArguments report_args;
  CLI::App report("ddp-report", "ddp-report");
  ddp::declare_report_options(report, report_args);
  ddp::TokenizeArguments tokenize_args;
  CLI::App tokenize("ddp-tokenize", "ddp-tokenize");
  ddp::declare_tokenize_options(tokenize, tokenize_args);
  ddp::ExportArguments export_args;
  CLI::App exporter("ddp-export", "ddp-export");
  ddp::declare_export_options(exporter, export_args);
  auto write = [&](const std::filesystem::path& path, const std::string& text) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream file(path, std::ios::binary);
    file << text;
    if (!file.flush()) throw std::runtime_error("cannot write " + path.string());
  };
  try {
    write(out / "man/man1/ddprun.1", ddp::ddprun_man_page(options, DDP_VERSION));
    write(out / "man/man1/ddp-train.1", ddp::ddp_train_man_page(trainer_options, sections, DDP_VERSION));
    write(out / "man/man1/ddp-generate.1", ddp::ddp_generate_man_page(ddp::option_reference(generate), DDP_VERSION));
    write(out / "man/man1/ddp-tokenize.1", ddp::ddp_tokenize_man_page(ddp::option_reference(tokenize), DDP_VERSION));
    write(out / "man/man1/ddp-export.1", ddp::ddp_export_man_page(ddp::option_reference(exporter), DDP_VERSION));
    write(out / "man/man1/ddp-report.1", ddp::ddp_report_man_page(ddp::option_reference(report), DDP_VERSION));
    std::string completion = ddp::bash_completion(options, trainer_options, sections);
    write(out / "bash-completion/completions/ddprun", completion);
    write(out / "bash-completion/completions/ddp-train", completion);  // bash loads a command's file by its name
  } catch (const std::exception& e) {
    std::cerr << "ddp-docs: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
