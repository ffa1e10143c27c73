#!/usr/bin/env bash
# Optional "training" group: the Debian packages tools/train needs (docs/training.md). Not part of the test
# command or CI: training is never run there. Idempotent; run as root (or with sudo available).
#   python3-torch          PyTorch (CPU) for Debian's /usr/bin/python3
#   libopenblas0-pthread   an optimised BLAS: without it Debian's torch uses the reference BLAS (~4× slower)
#   python3-regex          \p{L}/\p{N} classes for the GLM-4 pre-tokenizer regex
#   fortunes               the English training corpus (/usr/share/games/fortunes)
set -euo pipefail

PACKAGES=(python3 python3-numpy python3-torch libopenblas0-pthread python3-regex fortunes)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "setup-training: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup-training: packages present"
fi
