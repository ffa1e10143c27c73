#!/usr/bin/env bash
# ctest load.serve (docs/server.md "Load held"): `glint serve` on the tiny model holds 2,000 idle keep-alive
# connections + 500 slowloris connections while 64 streams generate; /health median < 200 ms; afterwards every
# pool is back to zero and RSS is within 10 % of the start. Bounded: ~12 s of load, < 60 s in all.
# Args: path-to-glint, path-to-serve_load. The server raises its own open-file limit (docs/server.md); so does
# the client.
set -euo pipefail
glint="$1"
client="$2"
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/serve_util.sh"  # $work, fail, start_server, stop_server

# Idle connections must outlive the load phase (keep-alive 60 s); the header deadline (10 s) cuts the slowloris
# clients inside it.
start_server --memory 256M --max-seqs 64 --max-model-len 256 --keep-alive-timeout 60 --header-timeout 10 \
  --no-request-log
"$client" --port "$port" --pid "$pid" --idle 2000 --slowloris 500 --streams 64 --seconds 12 ||
  fail "serve_load reported failures"
stop_server
echo "load.serve: ok"
