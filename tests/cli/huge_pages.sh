#!/usr/bin/env bash
# A container the page cache holds in 4 KB pages is read again at load and mapped on 2 MB pages (FastModel::Load,
# docs/performance.md "Weights on 2 MB pages"), the load line says so; --keep-small-pages keeps them small and says
# that too. The file is put in the page cache 4 KB at a time with readahead off (as a program reading it piecemeal
# would leave it) on make-tiny's expert-heavy preset, whose expert tensors span many 2 MB pages. Skips, saying why,
# where the kernel or the filesystem gives file mappings no 2 MB pages. Args: path-to-glint.
set -euo pipefail
glint=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo "[missing]")
if [[ "$thp" == *"[never]"* || "$thp" == "[missing]" ]]; then
  echo "SKIP: transparent huge pages are $thp on this kernel: file mappings get 4 KB pages only"; exit 0
fi
fs=$(stat -f -c %T "$tmp")
if [ "$fs" = tmpfs ] || [ "$fs" = ramfs ]; then
  echo "SKIP: $tmp is on $fs, whose pages are the file itself and cannot be read again from a disk"; exit 0
fi

"$glint" make-tiny --preset expert-heavy --out "$tmp/src" >/dev/null 2>&1
"$glint" convert --model "$tmp/src" --out "$tmp/model" >/dev/null 2>&1
container="$tmp/model/model.glint"

# Puts the first half of the container in the page cache in 4 KB folios (readahead off, one page per read).
cache_in_small_pages() {
  python3 - "$container" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
for offset in range(0, os.fstat(fd).st_size // 2, 4096):
    os.pread(fd, 1, offset)
os.close(fd)
EOF
}
# The load line's "(N%)" after "resident on 2 MB pages", and, after a re-read, the "(it was N%" before it.
load() { "$glint" run --model "$tmp/model" --prompt "hi" --max-tokens 1 --temperature 0 --threads 2 "$@" \
           >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "glint run $* failed"; }
         grep "resident on 2 MB pages" "$tmp/err" || fail "no 2 MB page report in the load line: $(cat "$tmp/err")"; }
share() { sed -n 's/.*resident on 2 MB pages (\([0-9]*\)%).*/\1/p' "$tmp/err" | head -1; }
before() { sed -n 's/.*(it was \([0-9]*\)%.*/\1/p' "$tmp/err" | head -1; }

# Cold (glint convert leaves the container out of the page cache): 2 MB pages where the kernel can, nothing re-read.
load >/dev/null
if grep -q "maps this file in 4 KB pages only" "$tmp/err"; then
  echo "SKIP: the kernel or the filesystem ($fs) maps this file in 4 KB pages only: $(grep "2 MB pages" "$tmp/err")"
  exit 0
fi
(( $(share) >= 95 )) || fail "a cold load is at $(share)% on 2 MB pages: $(cat "$tmp/err")"
! grep -q "reading it again" "$tmp/err" || fail "a cold load read the container again"

# Half in 4 KB pages: the load reads it again, says what it found first, and ends on 2 MB pages.
cache_in_small_pages
load >/dev/null
grep -q "reading it again from disk for 2 MB pages (--keep-small-pages skips this)" "$tmp/err" ||
  fail "no progress line before the re-read: $(cat "$tmp/err")"
[ -n "$(before)" ] || fail "the load line does not say the container was read again: $(cat "$tmp/err")"
(( $(before) < 90 )) || fail "seeding 4 KB pages left the container at $(before)%"
(( $(share) >= 95 )) || fail "read again, the container is at $(share)% on 2 MB pages: $(cat "$tmp/err")"
echo "huge_pages: read again from $(before)% to $(share)% on 2 MB pages"

# --keep-small-pages: as cached, and the load line says why it is below.
cache_in_small_pages
load --keep-small-pages >/dev/null
[ -z "$(before)" ] || fail "--keep-small-pages read the container again"
(( $(share) < 90 )) || fail "--keep-small-pages: $(share)% on 2 MB pages, expected the seeded 4 KB pages"
grep -q "kept (--keep-small-pages)" "$tmp/err" || fail "the load line does not say why: $(cat "$tmp/err")"

# The reference path has no container mapping to read again.
if "$glint" run --model "$tmp/src" --path reference --keep-small-pages --prompt hi --max-tokens 1 \
     >"$tmp/out" 2>"$tmp/err"; then fail "--keep-small-pages with --path reference was accepted"; fi
grep -q "applies to the fast path" "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"
echo "huge_pages: ok"
