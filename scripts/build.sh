#!/usr/bin/env bash
# Configures and builds one preset (release by default): scripts/build.sh [release|debug|asan|ci]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
jobs="${GLINT_JOBS:-$(nproc)}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs" 2>&1 | grep -v '^\[' || true
test "${PIPESTATUS[0]}" -eq 0
