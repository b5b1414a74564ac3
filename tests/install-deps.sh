#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the demo need; with --tests,
# also what only the test suite uses (promtool, from Debian's prometheus;
# nginx and wrk for the benchmark smoke run; node and npm for the real Stripe
# and Svix clients of tests/integration/test_clients.py, from Debian's nodejs
# and npm unless a node is already on PATH).
# Idempotent: does nothing when every package is already installed.
set -euo pipefail
packages=(
  build-essential meson ninja-build pkg-config
  libevent-dev libhiredis-dev libcurl4-openssl-dev libxxhash-dev libyaml-dev libssl-dev libjansson-dev
  libmimalloc-dev
  redis-server redis-tools python3 python3-pytest python3-yaml curl git
)
if [[ ${1:-} == --tests ]]; then
  packages+=(prometheus nginx wrk)
  command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
