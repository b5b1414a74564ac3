#!/usr/bin/env bash
# The image's build steps, in one place: the build stage of docker/Dockerfile
# runs this script, and so does CI (docker/check-image-recipe.sh) on a plain
# Debian 12 machine, so the recipe is tested without a Docker engine.
#
#   docker/build.sh [--skip-apt] WORKDIR    build and install into WORKDIR/install
#   docker/build.sh --deps-only             only install the build packages
#
# Steps: install the Debian 12 build packages that are missing (needs root;
# --skip-apt never calls apt and relies on them being present), then
#   meson setup WORKDIR/build --prefix=/usr/local --sysconfdir=/etc -Dbuildtype=release
#   ninja -C WORKDIR/build
#   meson install -C WORKDIR/build --destdir WORKDIR/install
# and add the configuration files to the install tree. The result is an
# install tree that the runtime stage copies to / as it is:
#
#   usr/local/bin/idempotency-proxy                               the binary
#   etc/idempotency-proxy/idempotency-proxy.yaml                  the container config (docker/idempotency-proxy.yaml)
#   usr/local/share/doc/idempotency-proxy/idempotency-proxy.yaml  the annotated sample (conf/)
#   usr/local/share/doc/idempotency-proxy/LICENSE
#
# The source tree is the checkout this script lives in. WORKDIR/build and
# WORKDIR/install are recreated on every run.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
build_packages=(
  gcc libc6-dev meson ninja-build pkg-config
  libevent-dev libhiredis-dev libcurl4-openssl-dev libxxhash-dev libyaml-dev libssl-dev libjansson-dev
  libmimalloc-dev
)

usage() {
  sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

skip_apt=false
deps_only=false
workdir=
while (($#)); do
  case $1 in
    --skip-apt) skip_apt=true ;;
    --deps-only) deps_only=true ;;
    -h | --help) usage ;;
    -*) echo "build.sh: unknown option $1" >&2; usage ;;
    *) [[ -z $workdir ]] || usage; workdir=$1 ;;
  esac
  shift
done
$deps_only || [[ -n $workdir ]] || usage

install_build_packages() {
  local missing=() p
  for p in "${build_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "build.sh: missing build packages: ${missing[*]} (run as root, or install them and pass --skip-apt)" >&2
    exit 1
  fi
  echo "build.sh: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

$skip_apt || install_build_packages
$deps_only && exit 0

mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
build=$workdir/build
destdir=$workdir/install
rm -rf "$build" "$destdir"

meson setup "$build" "$src" --prefix="$prefix" --sysconfdir=/etc -Dbuildtype=release
ninja -C "$build"
meson install -C "$build" --destdir "$destdir" --no-rebuild

# meson.build installs only the binary; the configs go in here. The container
# config deliberately takes the documented path even if meson ever installs
# the sample there: inside a container the listeners must bind 0.0.0.0.
install -D -m 0644 "$src/docker/idempotency-proxy.yaml" "$destdir/etc/idempotency-proxy/idempotency-proxy.yaml"
doc=$destdir$prefix/share/doc/idempotency-proxy
install -D -m 0644 "$src/conf/idempotency-proxy.yaml" "$doc/idempotency-proxy.yaml"
install -D -m 0644 "$src/LICENSE" "$doc/LICENSE"

bin=$destdir$prefix/bin/idempotency-proxy
[[ -x $bin ]] || { echo "build.sh: $bin was not installed" >&2; exit 1; }
echo "build.sh: install tree in $destdir:"
(cd "$destdir" && find . -type f | sort | sed 's|^\./|  /|')
