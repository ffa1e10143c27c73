#!/usr/bin/env bash
# Sets up, builds (release) and runs the main job on the embedded default model. The first README command.
#   scripts/run.sh                  serve the embedded default model (glint-tiny) on http://127.0.0.1:8080
#                                   (OpenAI-compatible; Ctrl-C stops it)
#   scripts/run.sh [glint args...]  run any glint subcommand instead, e.g. scripts/run.sh run --prompt "Hi"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --build-only  # what building and serving needs; the tests' packages come with scripts/test.sh
cmake --preset release >/dev/null
# Only the glint binary: the tests and benchmarks (scripts/test.sh builds them, in build/ci) are not needed to serve.
echo "glint: building the glint binary only (release; tests: bash scripts/test.sh)" >&2
cmake --build --preset release -j "${GLINT_JOBS:-$(nproc)}" --target glint
if (($#)); then
  exec build/release/src/cli/glint "$@"
fi
echo "glint: serving the default model on http://127.0.0.1:8080 (try: curl -s localhost:8080/v1/chat/completions \\
  -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'); Ctrl-C stops it" >&2
exec build/release/src/cli/glint serve
