# Shared by the disaggregation tests under mpirun (tests/mpi/cli_pd.sh, cli_pd_mtp.sh). Source it after
# tests/cli/lib/pd_util.sh and tests/mpi/lib/mpi_util.sh (with $mpirun set). It defines:
#   serve NAME RANKS ARGS...  `start NAME ARGS` (pd_util.sh), under mpirun -np RANKS when RANKS > 1
#   transfer_header BASE      the X-Glint-Prefill header naming BASE's transfer plane
#   request_set SUBJECT ID    a set of requests, one a line (path, a space, the body): a completion and a chat about
#                             SUBJECT, a 100-token prompt of ids from ID (4 chunks of a 32-token budget) and n = 2
#   answers SET BASE [HEADER] the texts BASE answers to the requests of $work/SET.requests, one line each
# shellcheck shell=bash

serve() {
  local name="$1" ranks="$2"
  shift 2
  launcher=()
  [[ "$ranks" -gt 1 ]] && launcher=(timeout 240 "$mpirun" "${MPIRUN_LOCAL[@]}" -np "$ranks")
  start "$name" "$@"
}
transfer_header() { echo "X-Glint-Prefill: 127.0.0.1:$(curl -s "$1/health" | json 'd["transfer_port"]')"; }

request_set() {
  local ids
  ids="$(python3 -c "print(','.join(str($2 + i * 7 % 3000) for i in range(100)))")"
  echo "/v1/completions {\"prompt\": \"Once upon a time there was a $1 who lived in a village near the forest. One day\", \"max_tokens\": 16, \"temperature\": 0, \"ignore_eos\": true}"
  echo "/v1/chat/completions {\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story about a $1.\"}], \"max_tokens\": 16, \"temperature\": 0}"
  echo "/v1/completions {\"prompt\": [$ids], \"max_tokens\": 16, \"temperature\": 0, \"ignore_eos\": true}"
  echo "/v1/completions {\"prompt\": \"The $1 of the mountain said to his people that\", \"max_tokens\": 12, \"temperature\": 0, \"n\": 2, \"ignore_eos\": true}"
}

answers() {
  local path body extra=()
  [[ $# -ge 3 ]] && extra=(-H "$3")
  while read -r path body; do
    curl -s --max-time 60 "$2$path" -H 'Content-Type: application/json' "${extra[@]+"${extra[@]}"}" -d "$body" |
      json '[c.get("text") or c["message"]["content"] for c in d["choices"]]' || fail "$2$path did not answer"
  done <"$work/$1.requests"
}
