#!/usr/bin/env bash
# Sets up, builds (release) and runs the main job on the embedded default model. The first README command.
#   scripts/run.sh                  generate text from the embedded tiny model
#   scripts/run.sh [glint args...]  run any glint subcommand instead, e.g. scripts/run.sh inspect DIR
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "${GLINT_JOBS:-$(nproc)}"
if (($#)); then
  exec build/release/src/cli/glint "$@"
fi
exec build/release/src/cli/glint run --prompt "The quick brown fox" --max-tokens 48
