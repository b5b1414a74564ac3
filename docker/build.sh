#!/usr/bin/env bash
# The image's build steps, in one place: the build stage of docker/Dockerfile
# runs this script (CI builds that image: docker/test-image.sh); it works the
# same on a plain Debian 12 machine.
#
#   docker/build.sh [--skip-apt] WORKDIR    build and install into WORKDIR/install
#   docker/build.sh --deps-only             only install the build packages
#   docker/build.sh --backports-only        only enable bookworm-backports (pinned), no install
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
  libevent-dev libcurl4-openssl-dev libxxhash-dev libyaml-dev libssl-dev libjansson-dev
  libmimalloc-dev libhttp-parser-dev
)
# The Redis client library: hiredict 1.3.1 (a maintained fork of hiredis 1.2;
# the shims install it as pkg-config hiredis/hiredis_ssl and <hiredis/*.h>),
# only in bookworm-backports. They replace Debian 12's libhiredis-dev 0.14.
backports_build_packages=(libhiredict-dev libhiredict-shims-dev)
# Everything this project takes from bookworm-backports: the library (build
# and runtime: libhiredict1.3.1) and valkey (tests only). The apt pin written
# by enable_backports admits exactly these; nothing else comes from there.
backports_pinned="libhiredict-dev libhiredict-shims-dev libhiredict1.3.1 valkey-server valkey-sentinel valkey-tools"
backports_sources=/etc/apt/sources.list.d/idempotency-proxy-backports.sources
backports_pin=/etc/apt/preferences.d/idempotency-proxy-backports

usage() {
  sed -n '6,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

skip_apt=false
deps_only=false
backports_only=false
workdir=
while (($#)); do
  case $1 in
    --skip-apt) skip_apt=true ;;
    --deps-only) deps_only=true ;;
    --backports-only) backports_only=true ;;
    -h | --help) usage ;;
    -*) echo "build.sh: unknown option $1" >&2; usage ;;
    *) [[ -z $workdir ]] || usage; workdir=$1 ;;
  esac
  shift
done
$deps_only || $backports_only || [[ -n $workdir ]] || usage

# Adds bookworm-backports as an apt source (a deb822 file, unless a source
# already names that suite) and a pin: the packages of $backports_pinned at
# priority 500, everything else from backports at -1 (never installed). No
# apt call here passes -t bookworm-backports: -t lifts every backports package
# to 990, over a general pin, and drags in newer dependencies. Idempotent;
# needs root.
enable_backports() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "build.sh: enabling bookworm-backports needs root" >&2
    exit 1
  fi
  if ! grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat >"$backports_sources" <<'EOF'
# idempotency-proxy: bookworm-backports, for the packages pinned in
# /etc/apt/preferences.d/idempotency-proxy-backports only.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  fi
  cat >"$backports_pin" <<EOF
# idempotency-proxy: only these packages come from bookworm-backports.
Package: $backports_pinned
Pin: release n=bookworm-backports
Pin-Priority: 500

Package: *
Pin: release n=bookworm-backports
Pin-Priority: -1
EOF
}

# Prints those of the arguments that are not installed, one a line.
missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

install_build_packages() {
  local missing backports
  mapfile -t missing < <(missing_packages "${build_packages[@]}")
  mapfile -t backports < <(missing_packages "${backports_build_packages[@]}")
  ((${#missing[@]} + ${#backports[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "build.sh: missing build packages: ${missing[*]} ${backports[*]} (run as root, or install them and pass --skip-apt)" >&2
    exit 1
  fi
  echo "build.sh: installing ${missing[*]} ${backports[*]}"
  enable_backports
  apt-get update -q
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  if ((${#backports[@]})); then
    # no -t bookworm-backports: it would lift every backports package to
    # priority 990, over the pin's -1, and drag in newer dependencies
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${backports[@]}"
  fi
}

if $backports_only; then
  enable_backports
  exit 0
fi
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
