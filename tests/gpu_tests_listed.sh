#!/usr/bin/env bash
# Every test executable with [gpu] cases is run by scripts/gpu_check.sh: a GPU is lent rarely and for
# minutes, and a [gpu] case its script does not run is one no machine ever runs.
# Usage: gpu_tests_listed.sh BUILD_DIR SOURCE_DIR
set -u
status=0
for test in "$1"/bin/test_*; do
  name=$(basename "$test")
  "$test" --list-tags | grep -qF '[gpu]' || continue
  if ! grep -qF "build/bin/$name \"[gpu]\"" "$2/scripts/gpu_check.sh"; then
    echo "$name has [gpu] cases that scripts/gpu_check.sh (gpu_unit_tests) does not run"
    status=1
  fi
done
exit $status
