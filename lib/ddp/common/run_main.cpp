#include "ddp/common/run_main.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

int report(const ProgramErrors& errors, int status, const char* kind, const std::string& what) {
  std::string prefix = errors.prefix ? errors.prefix() : "";
  std::fprintf(stderr, "%s: %s%s: %s\n", errors.program, prefix.c_str(), kind, what.c_str());
  std::fflush(stderr);
  if (errors.exit_at_once && errors.exit_at_once()) std::_Exit(status);
  return status;
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
    return report(errors, kExitFailure, errors.failure, without_backtrace(e.what()));
  }
}

}  // namespace ddp
