# Shared by the tests of the peer scripts (tests/cli/peer_llama_cpp.sh, peer_ik_llama.sh). Source it after setting
# $script (the peer script under test) and $root (the repository). It makes the scratch directory $work (removed
# at exit, after the commands of the array $cleanup_commands), picks $python (Debian's python3 first, where
# scripts/setup.sh installs numpy) and defines:
#   fail MESSAGE                   print FAIL and exit 1
#   check_shell_scripts FILES...   shellcheck the script, bench/peer/lib.sh and FILES (skipped, with the reason,
#                                  when shellcheck is absent)
#   expect_error FRAGMENT ARGS...  run the script with ARGS: it must exit 2 with FRAGMENT in its message
#   check_gguf_writer WRITER PYTHONPATH ARCH   the writer at the tiny widths against its own check
# shellcheck shell=bash
# shellcheck disable=SC2154  # $script and $root are set by the sourcing test

work=$(mktemp -d)
cleanup_commands=()
peer_util_cleanup() {
  local command
  for command in "${cleanup_commands[@]}"; do
    eval "$command" || true
  done
  rm -rf "$work"
}
trap peer_util_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

python=/usr/bin/python3
[[ -x $python ]] || python=python3

check_shell_scripts() {  # more files to check
  if command -v shellcheck >/dev/null; then
    shellcheck -x "$script" "$root/bench/peer/lib.sh" "$@" || fail "shellcheck found problems"
  else
    echo "skipped: shellcheck is not installed"
  fi
}

expect_error() {  # expected message fragment, arguments...
  local want=$1 rc=0 name
  name=$(basename "$script")
  shift
  bash "$script" "$@" >"$work/out" 2>"$work/err" || rc=$?
  [[ $rc -eq 2 ]] || fail "$name $*: exit $rc, expected 2 ($(cat "$work/err"))"
  grep -qF -- "$want" "$work/err" || fail "$name $*: message '$(cat "$work/err")' lacks '$want'"
}

# A GGUF writer at the tiny widths (hidden 64, vocabulary 512): the file it writes passes its own check, and the
# check at the bench widths rejects it, naming the key and the tensor that differ.
check_gguf_writer() {  # writer script, PYTHONPATH with the tree's gguf-py, the architecture's key prefix
  local writer=$1 rc=0
  PYTHONPATH=$2 "$python" "$writer" write --preset tiny --out "$work/tiny.gguf" >/dev/null ||
    fail "the writer failed at the tiny widths"
  PYTHONPATH=$2 "$python" "$writer" check --preset tiny "$work/tiny.gguf" >/dev/null ||
    fail "the writer's own check rejects its tiny GGUF"
  PYTHONPATH=$2 "$python" "$writer" check --preset bench "$work/tiny.gguf" >/dev/null 2>"$work/err" || rc=$?
  [[ $rc -eq 1 ]] || fail "check at the bench widths of a tiny GGUF: exit $rc, expected 1"
  grep -qF "key $3.embedding_length: 64, expected 4096" "$work/err" || fail "check message: $(cat "$work/err")"
  grep -qF 'tensor token_embd.weight: ne [64, 512], expected [4096, 154880]' "$work/err" ||
    fail "check message: $(cat "$work/err")"
}
