#include "ddp/common/run_main.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <system_error>

#include "ddp/common/error.h"
#include "ddp/common/interruption.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

// Each line of a message with several (a config with two problems) gets the program, the rank
// and the kind of its own: every line then reads alone, and ddprun, which shows a usage error once
// for all ranks, knows each line for one (Note [One usage error]).
int report(const ProgramErrors& errors, int status, const char* kind, const std::string& what) {
  if (errors.claim) errors.claim();
  std::string prefix = errors.prefix ? errors.prefix() : "";
  std::string text;
  for (std::size_t from = 0; from <= what.size();) {
    std::size_t end = std::min(what.find('\n', from), what.size());
    if (end > from || text.empty())
      text += std::string(errors.program) + ": " + prefix + kind + ": " + what.substr(from, end - from) + "\n";
    from = end + 1;
  }
  std::fputs(text.c_str(), stderr);  // one write: the lines stay together between ranks'
  std::fflush(stderr);
  if (errors.exit_at_once && errors.exit_at_once()) {
    if (errors.before_exit) errors.before_exit();
    std::_Exit(status);
  }
  return status;
}

// LibTorch's allocator failure from its own words on: "[enforce fail at alloc_cpu.cpp:75] err == 0. "
// says where in LibTorch, which is no use to a user.
std::string allocator_words(const std::string& what) {
  auto from = what.find("DefaultCPUAllocator:");
  return from == std::string::npos ? what : what.substr(from);
}

// A path the process may not reach (a directory it cannot search) is the user's to fix; a full
// disk or a failing device is an output error, as throw_output_error classifies them.
bool users_to_fix(const std::filesystem::filesystem_error& e) {
  const int code = e.code().value();
  return code == EACCES || code == EPERM || code == ENOTDIR || code == ENAMETOOLONG || code == ELOOP;
}

// What run_main reports of an exception, and the exit status it gives: one list of the kinds, for
// run_main and for exit_status_of alike.
struct Classified {
  int status;
  const char* kind;
  std::string what;
};

constexpr const char* kMemoryAdvice =
    "without dist.shard every rank holds the whole model, its gradients and its optimizer state (16 bytes a "
    "parameter with Adam in float32): dist.shard optimizer, gradients or parameters split them over the ranks "
    "(docs/parallelism.md), and model.embedding_sharding table or row a model's embedding tables "
    "(docs/click-through.md); or lower train.batch_size";

Classified classify(const std::exception_ptr& error, const char* failure, const std::string& memory_advice = "") {
  try {
    std::rethrow_exception(error);
  } catch (const Interrupted& e) {
    const char* name = sigabbrev_np(e.signal());
    return {128 + e.signal(), "stopped", std::string("by SIG") + (name ? name : "?") + "; " + e.what()};
  } catch (const UserError& e) {
    return {kExitUsage, "error", e.what()};
  } catch (const std::filesystem::filesystem_error& e) {
    const std::string what = e.path1().empty() ? std::string(e.what()) : e.path1().string() + ": " + e.code().message();
    return users_to_fix(e) ? Classified{kExitUsage, "error", what} : Classified{kExitIoError, "I/O error", what};
  } catch (const IoError& e) {
    return {kExitIoError, "I/O error", e.what()};
  } catch (const std::system_error& e) {
    // std::thread's words when no thread can be made, which say nothing of why.
    if (e.code() == std::errc::resource_unavailable_try_again)
      return {kExitFailure, "out of resources",
              std::string(e.what()) +
                  ": a thread could not be started, most likely as the process is at a limit on its tasks "
                  "(ulimit -u, or a cgroup's pids.max: docker --pids-limit, systemd's TasksMax) or on its address "
                  "space (ulimit -v or -d)"};
    return {kExitFailure, failure, without_backtrace(e.what())};
  } catch (const std::exception& e) {
    if (is_out_of_memory(e))
      return {kExitFailure, "out of memory",
              allocator_words(without_backtrace(e.what())) + "; " +
                  (memory_advice.empty() ? std::string(kMemoryAdvice) : memory_advice)};
    return {kExitFailure, failure, without_backtrace(e.what())};
  } catch (...) {
    return {kExitFailure, failure, "an exception that says nothing of itself"};
  }
}

}  // namespace

int exit_status_of(const std::exception_ptr& error) {
  try {
    return classify(error, "failed").status;
  } catch (...) {  // no memory left for its message: the status of running out of it
    return kExitFailure;
  }
}

int run_main(const ProgramErrors& errors, const std::function<int()>& body) {
  try {
    return body();
  } catch (...) {
    const Classified error = classify(std::current_exception(), errors.failure,
                                      errors.memory_advice ? errors.memory_advice() : std::string());
    return report(errors, error.status, error.kind, error.what);
  }
}

}  // namespace ddp
