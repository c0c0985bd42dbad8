#include "ddp/common/run_main.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

int report(const ProgramErrors& errors, int status, const char* kind, const std::string& what) {
  if (errors.claim) errors.claim();
  std::string prefix = errors.prefix ? errors.prefix() : "";
  std::fprintf(stderr, "%s: %s%s: %s\n", errors.program, prefix.c_str(), kind, what.c_str());
  std::fflush(stderr);
  if (errors.exit_at_once && errors.exit_at_once()) std::_Exit(status);
  return status;
}

// LibTorch's allocators say it in a c10::Error; the standard library throws std::bad_alloc.
bool out_of_memory(const std::exception& e) {
  const std::string what = e.what();
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr || what.find("can't allocate memory") != std::string::npos ||
         what.find("not enough memory") != std::string::npos ||  // LibTorch 2.x's CPU allocator
         what.find("CUDA out of memory") != std::string::npos;
}

// LibTorch's allocator failure from its own words on: "[enforce fail at alloc_cpu.cpp:75] err == 0. "
// says where in LibTorch, which is no use to a user.
std::string allocator_words(const std::string& what) {
  auto from = what.find("DefaultCPUAllocator:");
  return from == std::string::npos ? what : what.substr(from);
}

}  // namespace

int run_main(const ProgramErrors& errors, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UserError& e) {
    return report(errors, kExitUsage, "error", e.what());
  } catch (const IoError& e) {
    return report(errors, kExitIoError, "I/O error", e.what());
  } catch (const std::exception& e) {
    if (out_of_memory(e))
      return report(errors, kExitFailure, "out of memory",
                    allocator_words(without_backtrace(e.what())) +
                        "; without dist.shard every rank holds the whole model, its gradients and its optimizer "
                        "state (16 bytes a parameter with Adam in float32): dist.shard optimizer, gradients or "
                        "parameters split them over the ranks (docs/parallelism.md), and model.embedding_sharding "
                        "table or row a model's embedding tables (docs/click-through.md); or lower train.batch_size");
    return report(errors, kExitFailure, errors.failure, without_backtrace(e.what()));
  } catch (...) {
    return report(errors, kExitFailure, errors.failure, "an exception that says nothing of itself");
  }
}

}  // namespace ddp
