#!/usr/bin/env bash
# Installs every system dependency of glint from Debian 12 packages, and the pinned npm packages the tests use.
# Idempotent: installs nothing when everything is present. Run as root (or with sudo available).
#   scripts/setup.sh               everything (build, tests, lint, benchmarks)
#   scripts/setup.sh --build-only  what building and serving glint needs (scripts/run.sh): no test packages, no npm
set -euo pipefail
cd "$(dirname "$0")/.."

# What building and serving needs (scripts/run.sh installs only these: `setup.sh --build-only`).
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config git      # toolchain
  libbenchmark-dev                                      # configure finds it (bench/); kernel benchmarks
  nlohmann-json3-dev libcli11-dev libpcre2-dev          # JSON (io/, server/), CLI, tokenizer regex
  libxxhash-dev libhwy-dev libcpp-httplib-dev libboost-dev  # prefix-cache hashes, SIMD, HTTP (httplib: the bench client; Beast/Asio: glint serve)
  libopenmpi-dev openmpi-bin                            # dist/: several ranks over MPI (docs/distributed.md)
  liburing-dev                                          # io_uring reads of routed experts (docs/expert-cache.md)
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev # image input: decoders (src/media, docs/vision-input.md)
  libssl-dev                                            # libcrypto: HMAC-SHA256 of the transfer plane's handshake (docs/disaggregation.md)
)
# What the tests, lint and benchmarks add (scripts/test.sh).
TEST_PACKAGES=(
  clang libclang-rt-14-dev clang-format clang-tidy      # libFuzzer targets (tests/fuzz); scripts/lint.sh
  libgtest-dev libgmock-dev                             # unit tests
  gnuplot-nox curl nodejs npm python3 jq                # plots, black-box server and CLI tests (jq: JSON output)
  python3-jsonschema                                    # structured-output CLI test validates outputs (tests/cli/structured_output.sh)
  python3-numpy                                         # tools/vision_oracle.py: the float64 vision-tower oracle (docs/vision.md)
  chromium                                              # the web UI's browser test (tests/node/webui.test.mjs)
  shellcheck                                            # the script lint
  iproute2                                              # emulated hosts: ip netns, veth, tc (tests/cluster)
)
build_only=0
[[ "${1:-}" == "--build-only" ]] && build_only=1
PACKAGES=("${BUILD_PACKAGES[@]}")
((build_only)) || PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
# A node/npm not from Debian (e.g. a preinstalled Node 20) is fine: do not ask apt for them.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for package in "${missing[@]}"; do
    [[ "$package" == nodejs || "$package" == npm ]] || filtered+=("$package")
  done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: system packages present"
fi

# Pinned npm packages for the black-box API tests (tests/node/package.json + package-lock.json).
if ((!build_only)) && [[ -f tests/node/package.json ]]; then
  if [[ ! -d tests/node/node_modules ]] || [[ tests/node/package-lock.json -nt tests/node/node_modules ]]; then
    (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
