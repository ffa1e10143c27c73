#!/usr/bin/env bash
# Source hygiene (docs/testing.md "Lint"). scripts/test.sh runs it after the build, so CI does too:
#   1. every tracked C++ file (src/, tests/, bench/) formatted as .clang-format says (clang-format 14, Debian 12's);
#   2. clang-tidy (.clang-tidy's checks, warnings are errors) on "the change": the src/*.cc files that differ
#      between the commit named in .ci/lint-base (the last landing) and the working tree, or the files given.
#
#   scripts/lint.sh [--preset NAME] [--format-only | --tidy-only] [file.cc ...]
#   scripts/lint.sh --format-all     rewrite every tracked C++ file with clang-format (the one formatting commit)
#   scripts/lint.sh --land           write HEAD into .ci/lint-base (after a landing; commit the file)
#
# A base commit this clone does not have (a shallow clone, a tarball) stops the lint with a message: the change is
# then unknown. GLINT_LINT_BASE=<commit> picks another base; GLINT_LINT_BASE=none skips clang-tidy, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=ci
run_format=1
run_tidy=1
case "${1:-}" in
  --preset) preset="$2"; shift 2 ;;
esac
case "${1:-}" in
  --format-only) run_tidy=0; shift ;;
  --tidy-only) run_format=0; shift ;;
  --land)
    git rev-parse HEAD >.ci/lint-base
    echo "lint: .ci/lint-base is now $(cat .ci/lint-base); commit it"
    exit 0 ;;
  --format-all) mode=format-all; shift ;;
esac
format=$(command -v clang-format-14 || command -v clang-format || true)
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
[[ -n "$format" && -n "$tidy" ]] || { echo "lint: clang-format and clang-tidy are needed: run scripts/setup.sh" >&2; exit 1; }
in_git=0
git rev-parse --is-inside-work-tree >/dev/null 2>&1 && in_git=1

# Every C++ source of the project (there is no third-party or generated C++ in the tree).
if ((in_git)); then
  mapfile -t sources < <(git ls-files '*.cc' '*.h')
else
  mapfile -t sources < <(find src tests bench \( -name '*.cc' -o -name '*.h' \) | sort)
fi

if [[ "${mode:-}" == format-all ]]; then
  "$format" -i "${sources[@]}"
  echo "lint: formatted ${#sources[@]} files; build and test before committing (scripts/test.sh)"
  exit 0
fi

if ((run_format)); then
  report=$(mktemp)
  if ! "$format" --dry-run -Werror "${sources[@]}" 2>"$report"; then
    files=$(grep -E '^[^:]+:[0-9]+:[0-9]+: error' "$report" | cut -d: -f1 | sort -u | wc -l || true)
    head -40 "$report" >&2
    rm -f "$report"
    echo "lint: $files of ${#sources[@]} files differ from .clang-format; format yours with clang-format -i FILE" \
         "(scripts/lint.sh --format-all rewrites the whole tree)" >&2
    exit 1
  fi
  rm -f "$report"
  echo "lint: clang-format: ${#sources[@]} files match .clang-format"
fi
((run_tidy)) || exit 0

# The files to tidy: the arguments, or the change since the base commit.
if (($# > 0)); then
  changed=("$@")
  what="given"
else
  base="${GLINT_LINT_BASE:-$(cat .ci/lint-base 2>/dev/null || true)}"
  base_source=".ci/lint-base"
  [[ -n "${GLINT_LINT_BASE:-}" ]] && base_source="GLINT_LINT_BASE"
  if [[ "$base" == none ]]; then
    echo "lint: GLINT_LINT_BASE=none: clang-tidy SKIPPED (no file checked)"
    exit 0
  fi
  if [[ -z "$base" ]]; then
    echo "lint: .ci/lint-base is missing or empty: the change to tidy is unknown (restore it, or set" \
         "GLINT_LINT_BASE=<commit>, or GLINT_LINT_BASE=none to skip clang-tidy)" >&2
    exit 1
  fi
  # A shallow clone may lack the base: deepen it from its origin once (quietly; offline it stays missing).
  if ((in_git)) && ! git cat-file -e "$base^{commit}" 2>/dev/null &&
     [[ "$(git rev-parse --is-shallow-repository 2>/dev/null)" == true ]]; then
    git fetch --quiet --unshallow 2>/dev/null || true
  fi
  if ((!in_git)) || ! git cat-file -e "$base^{commit}" 2>/dev/null; then
    echo "lint: the lint base $base ($base_source) is not in this clone's history (a shallow clone or a" \
         "tarball?), so the change to tidy is unknown: fetch the history (git fetch --unshallow), or set" \
         "GLINT_LINT_BASE=<commit>, or GLINT_LINT_BASE=none to skip clang-tidy" >&2
    exit 1
  fi
  # Against the working tree: in CI it is HEAD; by hand it includes what is not committed yet.
  mapfile -t changed < <(git diff --name-only --diff-filter=ACMR "$base" -- 'src/*.cc')
  what="changed since ${base:0:12} ($base_source)"
fi
database="build/$preset/compile_commands.json"
[[ -f "$database" ]] || { echo "lint: $database is missing: build the $preset preset first" >&2; exit 1; }
# Only files the build compiles (the fuzz targets and embedded sources are not in the database).
tidy_files=()
for file in "${changed[@]+"${changed[@]}"}"; do
  grep -q "\"file\": \"$PWD/$file\"" "$database" && tidy_files+=("$file")
done
echo "lint: clang-tidy on ${#tidy_files[@]} src/ files $what${tidy_files[*]:+: ${tidy_files[*]}}"
((${#tidy_files[@]})) || { echo "lint: clean (${SECONDS}s)"; exit 0; }
# One clang-tidy per file, GLINT_JOBS (default: every core) at a time; every failing file is reported.
logs=$(mktemp -d)
export tidy preset logs
printf '%s\n' "${tidy_files[@]}" | xargs -P "${GLINT_JOBS:-$(nproc)}" -I{} bash -c \
  '"$tidy" -p "build/$preset" --quiet --extra-arg=-Wno-unknown-warning-option "$1" >"$logs/${1//\//_}" \
     2>/dev/null || echo "$1" >>"$logs/FAILED"' _ {}
if [[ -f "$logs/FAILED" ]]; then
  for file in $(sort "$logs/FAILED"); do
    grep -A3 'error:' "$logs/${file//\//_}" | head -20 >&2
    echo "lint: clang-tidy found problems in $file (run: $tidy -p build/$preset $file)" >&2
  done
  rm -rf "$logs"
  exit 1
fi
rm -rf "$logs"
echo "lint: clang-tidy clean (${SECONDS}s)"
