#!/usr/bin/env bash
# Soak benchmark (not in CI; the lead runs it on a quiet machine, figures go to docs/performance.md): 512
# concurrent streams for 10 minutes against `glint serve` on the tiny model, 10 % of them dropped mid-stream at
# random, with 200 idle keep-alive connections and 50 slowloris clients beside them. Prints the client's figures
# (streams completed, /health latency, RSS at the start, peak and end) and the server's /metrics at the end.
#   tests/load/soak.sh build/ci/src/cli/glint build/ci/tests/load/serve_load [seconds]
set -euo pipefail
glint="$1"
client="$2"
seconds="${3:-600}"
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/serve_util.sh"

start_server --memory 512M --max-seqs 64 --max-model-len 256 --max-queued 1024 --keep-alive-timeout 900 \
  --no-request-log
"$client" --port "$port" --pid "$pid" --idle 200 --slowloris 50 --streams 512 --seconds "$seconds" \
  --disconnect-percent 10 --max-tokens 64 || echo "soak: some checks failed (see above)"
curl -s "$base/metrics" | grep -E '^glint_(http|request_success|generation_tokens_total|server_)' || true
stop_server
