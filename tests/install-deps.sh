#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the demo need; with --tests,
# also what only the test suite uses (pytest-xdist, which runs the integration tests several
# at a time; promtool, from Debian's prometheus;
# nginx and wrk for the benchmark smoke run; node and npm for the real Stripe
# and Svix clients of tests/integration/test_clients.py, from Debian's nodejs
# and npm unless a node is already on PATH; valkey-server, which the store's
# tests also run against; redis-sentinel and valkey-sentinel for the Sentinel
# tests; openssl and iproute2 for the TLS and DNS tests; faketime (libfaketime) for the
# tests that step a proxy's wall clock; stress-ng, which loads the CPUs beside the
# topology, lease and readiness tests to show their waits hold on a busy machine;
# podman, runc and mmdebstrap for docker/test-image.sh, which builds the image
# without Docker or a registry; the lint of the scripts in test_deploy.py runs
# the package shellcheck). (A comment line must not begin with that word: the
# linter reads it as a directive.) kubernetes-client (kubectl 1.20, kustomize built in)
# renders docker/kubernetes in test_deploy.py; where another package (a cloud SDK's
# kubectl) owns /usr/bin/kubectl, dpkg cannot install both, so Debian's is unpacked, not
# installed, into tests/.kubectl, which the test runs instead of the other one.
# podman needs crun or runc: runc, because crun refuses a host with a hybrid
# cgroup v1/v2 hierarchy. Rootful podman with host or namespace networking
# needs neither uidmap nor slirp4netns, and podman build carries buildah's code.
# The Redis client library (hiredict, with the hiredis shims) and valkey come
# from bookworm-backports: docker/build.sh --backports-only adds that source
# with an apt pin so that nothing else is ever taken from it.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
packages=(
  build-essential meson ninja-build pkg-config
  libevent-dev libcurl4-openssl-dev libxxhash-dev libyaml-dev libssl-dev libjansson-dev
  libmimalloc-dev libhttp-parser-dev
  redis-server redis-tools python3 python3-pytest python3-yaml curl git openssl iproute2
)
backports=(libhiredict-dev libhiredict-shims-dev)
if [[ ${1:-} == --tests ]]; then
  packages+=(
    python3-pytest-xdist prometheus nginx wrk redis-sentinel
    faketime stress-ng
    podman runc mmdebstrap shellcheck
  )
  backports+=(valkey-server valkey-sentinel)
  command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
  kubectl_owner=$(dpkg-query -S /usr/bin/kubectl 2>/dev/null | cut -d: -f1 || true)
  [[ -z $kubectl_owner && -e /usr/bin/kubectl ]] && kubectl_owner="no package"
  [[ -n $kubectl_owner && $kubectl_owner != kubernetes-client ]] || packages+=(kubernetes-client)
fi
missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}
mapfile -t missing < <(missing_packages "${packages[@]}")
mapfile -t missing_bpo < <(missing_packages "${backports[@]}")
if ((${#missing[@]} + ${#missing_bpo[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "installing: ${missing[*]} ${missing_bpo[*]}"
  ((${#missing_bpo[@]} == 0)) || $sudo "$root/docker/build.sh" --backports-only
  $sudo apt-get update -q
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  if ((${#missing_bpo[@]})); then
    # replaces libhiredis-dev 0.14 (libhiredict-shims-dev conflicts with it); the
    # pin selects backports for these, no -t (it would override the pin's -1)
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing_bpo[@]}"
  fi
fi
if [[ ${1:-} == --tests && -n ${kubectl_owner:-} && $kubectl_owner != kubernetes-client &&
      ! -x $root/tests/.kubectl/usr/bin/kubectl ]]; then
  echo "unpacking kubernetes-client into tests/.kubectl (/usr/bin/kubectl belongs to $kubectl_owner)"
  deb_dir=$(mktemp -d)
  update=(apt-get update -q)
  [[ $(id -u) -eq 0 ]] || update=(sudo "${update[@]}")
  (cd "$deb_dir" && apt-get download -q kubernetes-client 2>/dev/null) ||
    { "${update[@]}" && (cd "$deb_dir" && apt-get download -q kubernetes-client); }
  dpkg-deb -x "$deb_dir"/kubernetes-client_*.deb "$root/tests/.kubectl"
  rm -rf "$deb_dir"
fi
if [[ ${1:-} == --tests ]]; then
  # the receivers behind the inbox (standardwebhooks), pinned by their lock file; again only
  # when the lock file changed since the last install
  receivers="$root/tests/receivers"
  if [[ ! -d $receivers/node_modules/standardwebhooks ||
        $receivers/package-lock.json -nt $receivers/node_modules/.package-lock.json ]]; then
    (cd "$receivers" && npm ci --ignore-scripts --no-audit --no-fund)
  fi
fi
