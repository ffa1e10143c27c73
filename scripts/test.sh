#!/usr/bin/env bash
# Sets up, builds (warnings are errors) and runs the whole test suite. The second README command.
#   scripts/test.sh            setup + build (ci preset) + lint (scripts/lint.sh) + ctest
#   scripts/test.sh --asan     the same under AddressSanitizer + UndefinedBehaviorSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
preset=ci
[[ "${1:-}" == "--asan" ]] && preset=asan
bash scripts/setup.sh
cmake --preset "$preset"
cmake --build --preset "$preset" -j "${GLINT_JOBS:-$(nproc)}"
bash scripts/lint.sh --preset "$preset"  # formatting of every source, clang-tidy on the change (docs/testing.md)
ctest --test-dir "build/$preset" --output-on-failure -j "${GLINT_JOBS:-$(nproc)}"
