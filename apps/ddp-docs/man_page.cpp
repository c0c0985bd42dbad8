#include "man_page.h"

#include <cctype>
#include <sstream>
#include <utility>
#include <vector>

#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

// Text as roff shows it: backslashes and hyphens escaped, a line never starting with a control
// character, markdown's backticks as bold.
std::string roff(const std::string& text) {
  std::string out;
  bool bold = false;
  for (char c : text) {
    if (c == '\\') out += "\\e";
    else if (c == '-') out += "\\-";
    else if (c == '`') out += (bold = !bold) ? "\\fB" : "\\fR";
    else out += c;
  }
  if (bold) out += "\\fR";
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

std::string header(const std::string& name, const std::string& version, const std::string& summary) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return ".TH " + upper + " 1 \"\" \"ddprun " + version + "\" \"User Commands\"\n.SH NAME\n" + roff(name) +
         " \\- " + roff(summary) + "\n";
}

// An OPTIONS section: each option's names, its value, and what it does.
std::string options_section(const std::vector<OptionReference>& options) {
  std::ostringstream out;
  out << ".SH OPTIONS\n";
  for (const auto& option : options) {
    out << ".TP\n";
    for (std::size_t i = 0; i < option.names.size(); ++i)
      out << (i ? ", " : "") << "\\fB" << roff(option.names[i]) << "\\fR";
    if (!option.value.empty()) out << " \\fI" << roff(option.value) << "\\fR";
    out << "\n" << roff(option.description);
    if (!option.choices.empty()) {
      std::string words;
      for (const auto& choice : option.choices) words += (words.empty() ? "" : ", ") + choice;
      out << " (" << roff(words) << ")";
    }
    out << "\n";
  }
  return out.str();
}

// The last sections of a tool's page (ddp-generate, ddp-report): its exit status, and the programs
// it works with.
std::string tool_closing(const std::string& exit_status) {
  return ".SH EXIT STATUS\n" + roff(exit_status) + "\n.SH SEE ALSO\n.BR ddprun (1),\n.BR ddp\\-train (1)\n";
}

}  // namespace

std::string ddprun_man_page(const std::vector<OptionReference>& options, const std::string& version) {
  std::ostringstream out;
  out << header("ddprun", version, "launch distributed data-parallel training, as torchrun does");
  out << ".SH SYNOPSIS\n"
      << ".B ddprun\n[\\fIOPTIONS\\fR] \\fICONFIG.yaml\\fR [\\fB\\-\\-set\\fR \\fIKEY=VALUE\\fR ...]\n.br\n"
      << ".B ddprun\n[\\fIOPTIONS\\fR] \\fISCRIPT.py\\fR [\\fIARGS\\fR ...]\n.br\n"
      << ".B ddprun\n[\\fIOPTIONS\\fR] \\fB\\-m\\fR \\fIMODULE\\fR [\\fIARGS\\fR ...]\n.br\n"
      << ".B ddprun\n[\\fIOPTIONS\\fR] \\fB\\-\\-no\\-python\\fR \\fIPROGRAM\\fR [\\fIARGS\\fR ...]\n.br\n"
      << ".B ddprun\n[\\fIOPTIONS\\fR] \\fB\\-\\-\\fR \\fIPROGRAM\\fR [\\fIARGS\\fR ...]\n";
  out << ".SH DESCRIPTION\n"
      << roff("Starts one worker per GPU or CPU slot with the torchrun environment, hosts the rendezvous, relays "
              "output by rank, and stops every worker when one fails (restarting the group up to --max-restarts "
              "times). A YAML config runs ddp-train(1), the built-in trainer; a Python script runs under python3 "
              "($" + std::string(env::kPython) + " chooses another), as torchrun runs it; any program runs after "
              "--. torchrun's command lines work with ddprun in its place.")
      << "\n";
  out << options_section(options);
  out << ".SH ENVIRONMENT\nEach worker gets\n";
  for (const char* name : {env::kRank, env::kLocalRank, env::kWorldSize, env::kLocalWorldSize, env::kGroupRank,
                           env::kGroupWorldSize, env::kRoleName, env::kRoleRank, env::kRoleWorldSize, env::kMasterAddr,
                           env::kMasterPort, env::kRunId, env::kRestartCount, env::kMaxRestarts})
    out << ".B " << roff(name) << "\n";
  out << roff("as torchrun sets them, and TORCHELASTIC_USE_AGENT_STORE, so that torch.distributed's env:// joins the "
              "launcher's store. OMP_NUM_THREADS is cores divided by workers unless set.")
      << "\n.TP\n.B " << roff(env::kRdzvSecret) << "\n"
      << roff("The job's secret for the rendezvous store's control values; never passed to a worker.") << "\n"
      << ".TP\n.B " << roff(env::kPython) << "\n" << roff("The Python that runs a script (default: python3 on PATH).")
      << "\n";
  out << ".SH EXIT STATUS\n";
  for (const auto& [status, meaning] : std::vector<std::pair<const char*, const char*>>{
           {"0", "every worker succeeded (a finished run run again: nothing to do)"},
           {"1", "a worker failed; otherwise a failed worker's own exit status, the first failure's"},
           {"2", "a bad command line, config or input: nothing ran, and a restart would fail alike"},
           {"74", "an output could not be written (disk full, I/O error)"},
           {"130", "stopped by SIGINT (Ctrl-C), after the workers saved a checkpoint to resume from"},
           {"143", "stopped by SIGTERM (a scheduler's preemption), likewise; 128+N for any other signal N"}})
    out << ".TP\n.B " << status << "\n" << roff(meaning) << "\n";
  out << ".SH EXAMPLES\n";
  for (const auto& [command, what] : std::vector<std::pair<const char*, const char*>>{
           {"ddprun --nproc-per-node 2 configs/fashion_mnist_convnet.yaml",
            "Train the config's model with 2 workers; run again, it resumes or says it finished."},
           {"ddprun --nproc-per-node 2 configs/fashion_mnist_convnet.yaml --set optim.lr=0.05 --set run.name=lr05",
            "The same with a key changed, into a run directory of its own."},
           {"DDPRUN_PYTHON=/usr/bin/python3 ddprun --nproc-per-node 4 train.py --epochs 3",
            "A torchrun script, under the Python named."},
           {"ddprun --nnodes 2 --node-rank 0 --master-addr node0 --nproc-per-node 4 train.yaml",
            "Node 0 of two; node 1 runs the same with --node-rank 1."},
           {"ddprun --nnodes 2:4 --rdzv-backend c10d --rdzv-endpoint node0:29500 --rdzv-id job7 train.yaml",
            "An elastic job: 2 to 4 nodes, each started alike, joining and leaving between rounds."},
           {"ddprun --nproc-per-node 2 -- hostname", "Any program, with each rank's output prefixed."}})
    out << ".TP\n.B " << roff(command) << "\n" << roff(what) << "\n";
  out << ".SH SEE ALSO\n.BR ddp\\-train (1)\n";
  return out.str();
}

std::string ddp_train_man_page(const std::vector<OptionReference>& options,
                               const std::vector<ConfigSchema::SectionReference>& sections, const std::string& version) {
  std::ostringstream out;
  out << header("ddp-train", version, "one data-parallel worker of ddprun, and its config keys");
  out << ".SH SYNOPSIS\n.B ddp\\-train\n\\fICONFIG.yaml\\fR [\\fB\\-\\-set\\fR \\fIKEY=VALUE\\fR ...] "
         "[\\fB\\-\\-print\\-config\\fR]\n";
  out << ".SH DESCRIPTION\n"
      << roff("Trains the model, data, sampler and loop a YAML config names. ddprun(1) starts one per rank; it reads "
              "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from its environment (or --rank, --world-size, "
              "--master-addr, --master-port when started by hand). A key is set in the file as section: {key: "
              "value} or on the command line as --set section.key=value; an unknown key is an error naming the "
              "nearest one.")
      << "\n" << options_section(options) << ".SH CONFIG KEYS\n";
  for (const auto& section : sections) {
    out << ".SS " << roff(section.name) << "\n";
    if (!section.doc.empty()) out << roff(section.doc) << "\n";
    for (const auto& key : section.keys) {
      out << ".TP\n\\fB" << roff(key.path) << "\\fR \\fI" << roff(key.type) << "\\fR (default " << roff(key.default_text)
          << ")\n" << roff(key.meaning) << "\n";
    }
  }
  out << ".SH SEE ALSO\n.BR ddprun (1)\n";
  return out.str();
}

std::string ddp_generate_man_page(const std::vector<OptionReference>& options, const std::string& version) {
  std::ostringstream out;
  out << header("ddp-generate", version, "sample text from a language model that ddprun trained");
  out << ".SH SYNOPSIS\n.B ddp\\-generate\n\\fIRUN\\fR [\\fIOPTIONS\\fR]\n";
  out << ".SH DESCRIPTION\n"
      << roff("Loads a finished run's model.pt (RUN is its run.output_dir, or the model.pt itself) into the model "
              "(gpt or llama) that the run's config.yaml describes, and draws tokens after a prompt, printing each as "
              "it is drawn; a Llama keeps a KV cache, so each token costs one position's work. Text goes through the "
              "SentencePiece tokenizer the run's tokens were made with: --tokenizer, or the tokenizer.model that "
              "ddp-tokenize left in the run directory or beside data.path. Without one, a byte-level model "
              "(model.vocab_size 256) reads and prints bytes; any model prints token ids with --ids and takes them "
              "with --prompt-ids. The same seed, model and prompt give the same text. A --config whose model: "
              "section differs from the run's own config.yaml is refused: the weights would fit and sample nonsense.")
      << "\n" << options_section(options);
  out << ".SH EXAMPLES\n.nf\nddp\\-generate runs/gpt_kjv \\-\\-prompt 'And God said' \\-\\-tokens 300\n"
         "ddp\\-generate runs/gpt_kjv/model.pt \\-\\-ids \\-\\-prompt\\-ids '65 110 100' \\-\\-temperature 0\n.fi\n";
  out << tool_closing("0 when the tokens were drawn; 2 for a bad command line, a missing or unreadable model.pt, "
                      "config.yaml or tokenizer, a model that is not a language model, or a prompt outside the "
                      "vocabulary; 1 for any other failure.");
  return out.str();
}

std::string ddp_tokenize_man_page(const std::vector<OptionReference>& options, const std::string& version) {
  std::ostringstream out;
  out << header("ddp-tokenize", version, "text into token shards for ddprun, through a SentencePiece tokenizer");
  out << ".SH SYNOPSIS\n.B ddp\\-tokenize\n\\fIOUT_DIR\\fR \\fB\\-\\-text\\fR \\fIFILE\\fR... [\\fIOPTIONS\\fR]\n";
  out << ".SH DESCRIPTION\n"
      << roff("Reads UTF-8 text files as one text, trains a SentencePiece tokenizer on it (BPE or unigram, with "
              "byte fallback, so that every text round-trips) or takes an existing tokenizer.model, and writes "
              "OUT_DIR/tokenizer.model and llm.c token shards, NAME_train_NNNNNN.bin and NAME_val_NNNNNN.bin (uint16 "
              "up to 65,536 pieces, uint32 above), which data.dataset tokens reads. Each line is encoded on its own, "
              "after the tokenizer's BOS id, which stands for the line break; the last whole lines, about "
              "--val-fraction of the text, are held out. Encoding uses every core and shows its progress; shards are "
              "written whole or not at all, and a re-run's leftover shards are removed. ddp-generate finds "
              "tokenizer.model beside the shards.")
      << "\n" << options_section(options);
  out << ".SH EXAMPLES\n.nf\nddp\\-tokenize data/kjv_sp \\-\\-text kjv.txt \\-\\-vocab\\-size 8000\n"
         "ddp\\-tokenize data/mine \\-\\-text *.txt \\-\\-tokenizer llama/tokenizer.model\n.fi\n";
  out << tool_closing("0 when the shards were written; 2 for a bad command line, a text file that is missing, empty "
                      "or not UTF-8, a tokenizer.model that is not a SentencePiece model, or a vocabulary the text "
                      "cannot fill; 74 when a file could not be written; 1 for any other failure.");
  return out.str();
}

std::string ddp_export_man_page(const std::vector<OptionReference>& options, const std::string& version) {
  std::ostringstream out;
  out << header("ddp-export", version, "a run's checkpoint as a Hugging Face model directory");
  out << ".SH SYNOPSIS\n.B ddp\\-export\n\\fIRUN\\fR [\\fIOPTIONS\\fR]\n";
  out << ".SH DESCRIPTION\n"
      << roff("Builds the model that RUN's config.yaml describes, loads a checkpoint of the run into it (the newest "
              "that verifies, or --checkpoint; written by any world size, mesh or sharding), and writes a directory "
              "that transformers' from_pretrained and model.init_from read: model.safetensors in the family's "
              "Hugging Face layout (GPT-2's for the gpt, LlamaForCausalLM's for the llama; shards and "
              "model.safetensors.index.json above --max-shard-size), config.json, model.pt, the run's config.yaml (so "
              "that ddp-generate samples from the export), and the tokenizer.model beside the run's data.path, if "
              "any. A run that kept no checkpoint exports its model.pt.")
      << "\n" << options_section(options);
  out << ".SH EXAMPLES\n.nf\nddp\\-export runs/llama_kjv\n"
         "ddp\\-export runs/llama_kjv \\-\\-checkpoint runs/llama_kjv/checkpoints/step_0000000400 \\-o hub/llama\n.fi\n";
  out << tool_closing("0 when the directory was written; 2 for a bad command line, a run without config.yaml, a "
                      "checkpoint that does not verify or fit the model, or a run with nothing to export; 74 when a "
                      "file could not be written; 1 for any other failure.");
  return out.str();
}

std::string ddp_report_man_page(const std::vector<OptionReference>& options, const std::string& version) {
  std::ostringstream out;
  out << header("ddp-report", version, "one HTML report of one or several ddprun runs, overlaid");
  out << ".SH SYNOPSIS\n.B ddp\\-report\n\\fIRUN\\fR [\\fIRUN\\fR ...] [\\fB\\-o\\fR \\fIPAGE.html\\fR]\n";
  out << ".SH DESCRIPTION\n"
      << roff("Reads each run's metrics.jsonl and config.yaml (a run's run.output_dir) and writes one self-contained "
              "page: a summary table, loss, throughput, communication, the ranks' timings and the system monitor's "
              "series as charts with the runs overlaid, pipeline stages where a run had them, and each run's config. "
              "Values that are not finite (NaN, inf) are noted, not drawn. The page is written whole or not at "
              "all, and never over one of the runs' own files.")
      << "\n" << options_section(options);
  out << tool_closing("0 when the page was written; 2 for a bad command line, a run without readable metrics, an "
                      "output that would overwrite a run's file or that may not be written there (permissions); 74 "
                      "when the page could not be written (a full disk, an I/O error); 1 for any other failure.");
  return out.str();
}

}  // namespace ddp
