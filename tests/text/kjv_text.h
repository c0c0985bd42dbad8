#pragma once
// Genesis and Exodus from Debian's bible-kjv, one verse a line without its reference: real text
// for the tokenizer tests.

#include <catch2/catch.hpp>

#include <string>

#include "support/subprocess.h"

namespace ddp::test {

/// Writes the text to `path` and returns true; false (and a visible skip) without the `bible` command.
inline bool write_kjv_text(const std::string& path) {
  auto made = run_shell("bible -f Gen1:1-Exo40:38 | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' | grep -v '^$' > " +
                            path,
                        std::chrono::seconds(60));
  if (made.exit_code != 0 || read_file(path).size() < 100000) {
    WARN("skipped: no King James Bible (Debian's bible-kjv; scripts/setup.sh installs it): " << made.err);
    return false;
  }
  return true;
}

/// Whether Debian's python3-sentencepiece answers; a visible skip when not.
inline bool have_python_sentencepiece() {
  auto probe = run_shell("/usr/bin/python3 -c 'import sentencepiece'", std::chrono::seconds(60));
  if (probe.exit_code != 0) WARN("skipped: no python3-sentencepiece to compare with (scripts/setup.sh installs it)");
  return probe.exit_code == 0;
}

}  // namespace ddp::test
