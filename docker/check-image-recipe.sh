#!/usr/bin/env bash
# Tests the container image's recipe without a Docker engine (CI has none):
#
#   1. copies this checkout's files (git ls-files: tracked, plus untracked ones
#      that are not ignored, so no build directories) into a clean temp dir;
#   2. runs docker/build.sh there, as the Dockerfile's build stage does;
#   3. checks the install tree (binary, container config, docs);
#   4. checks docker/runtime-packages.txt against the binary: every library
#      it links (ELF NEEDED, resolved by ldd, owner found by dpkg -S) comes
#      from a listed package, every listed library package is needed, and
#      every library ldd loads is a dependency of the listed packages;
#   5. starts the installed binary with the installed container config (ports
#      moved to free loopback ports, Redis pointed at a closed port) as uid
#      10001 like the image's USER: /healthz 200, /readyz 503, the Dockerfile's
#      HEALTHCHECK command succeeds, a keyed POST gets 503, SIGTERM exits 0;
#   6. lints: hadolint on the Dockerfile when installed (else built-in checks),
#      and docker/*.sh through shellcheck when installed.
#
#   docker/check-image-recipe.sh [--keep]    --keep leaves the temp dir
#
# Needs: git, python3, curl, readelf (binutils), dpkg; root (or the build
# packages already installed) for docker/build.sh. Exits 0 when every check
# passed, 1 otherwise; the last line says which.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
keep=false
[[ ${1:-} == --keep ]] && keep=true
image_uid=10001

failures=0
step() { printf '\n== %s\n' "$*"; }
ok() { printf '  ok    %s\n' "$*"; }
fail() { printf '  FAIL  %s\n' "$*"; failures=$((failures + 1)); }
note() { printf '  note  %s\n' "$*"; }
finish() {
  echo
  if ((failures)); then
    echo "image recipe: FAILED ($failures problem(s))"
    exit 1
  fi
  echo "image recipe: OK"
  exit 0
}

tmp=$(mktemp -d /tmp/idem-image-recipe.XXXXXX)
chmod 755 "$tmp" # the proxy runs as uid $image_uid below
proxy_pid=
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ -n $proxy_pid ]] && kill -0 "$proxy_pid" 2>/dev/null; then
    kill -KILL "$proxy_pid" 2>/dev/null
    wait "$proxy_pid" 2>/dev/null
  fi
  if $keep; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------------------
step "1. clean copy of the checkout in $tmp/src"
src=$tmp/src
mkdir -p "$src"
if ! git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  fail "$root is not a git checkout: cannot tell tracked files from build output"
  finish
fi
git -C "$root" ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do
    [[ -e $root/$f || -L $root/$f ]] && printf '%s\0' "$f" # skip deleted-but-tracked files
  done |
  tar -C "$root" --null -T - -cf - | tar -C "$src" -xf -
nfiles=$(find "$src" -type f | wc -l)
if [[ -x $src/docker/build.sh && -f $src/meson.build ]]; then
  ok "copied $nfiles files"
else
  fail "copy incomplete: no docker/build.sh or meson.build in $src"
  finish
fi
leftovers=$(find "$src" -maxdepth 1 -name 'build*' -print)
if [[ -z $leftovers ]]; then ok "no build directories copied"; else fail "build output was copied: $leftovers"; fi

# ---------------------------------------------------------------------------
step "2. docker/build.sh $tmp/work (log: $tmp/build.log)"
work=$tmp/work
if "$src/docker/build.sh" "$work" >"$tmp/build.log" 2>&1; then
  ok "build.sh succeeded"
else
  fail "build.sh failed; the end of its log:"
  tail -40 "$tmp/build.log" | sed 's/^/        /'
  finish
fi
destdir=$work/install
chmod -R go+rX "$work"

# ---------------------------------------------------------------------------
step "3. install tree $destdir"
bin=$destdir/usr/local/bin/idempotency-proxy
conf=$destdir/etc/idempotency-proxy/idempotency-proxy.yaml
if [[ -x $bin ]]; then ok "binary /usr/local/bin/idempotency-proxy"; else fail "no executable /usr/local/bin/idempotency-proxy"; fi
if [[ -f $conf ]] && cmp -s "$conf" "$src/docker/idempotency-proxy.yaml"; then
  ok "config /etc/idempotency-proxy/idempotency-proxy.yaml is docker/idempotency-proxy.yaml"
else
  fail "/etc/idempotency-proxy/idempotency-proxy.yaml missing or not docker/idempotency-proxy.yaml"
fi
for f in usr/local/share/doc/idempotency-proxy/idempotency-proxy.yaml usr/local/share/doc/idempotency-proxy/LICENSE; do
  if [[ -f $destdir/$f ]]; then ok "/$f"; else fail "no /$f"; fi
done
[[ -x $bin ]] || finish
if version=$("$bin" -V 2>&1); then ok "-V: $version"; else fail "-V failed: $version"; fi
if out=$(REDIS_PASSWORD=recipe-check "$bin" -t -c "$conf" 2>&1) && [[ $out == "configuration OK" ]]; then
  ok "-t -c on the installed config: $out"
else
  fail "-t -c on the installed config: $out"
fi

# ---------------------------------------------------------------------------
step "4. docker/runtime-packages.txt against the binary's libraries"
pkgfile=$src/docker/runtime-packages.txt
declare -A listed_lib=() listed_extra=()
while IFS= read -r line; do
  name=${line%%#*}
  name=${name//[[:space:]]/}
  [[ -z $name ]] && continue
  if [[ $line =~ \#[[:space:]]*extra: ]]; then listed_extra[$name]=1; else listed_lib[$name]=1; fi
  if dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q 'install ok installed' ||
    apt-cache show --no-all-versions "$name" >/dev/null 2>&1; then
    :
  else
    fail "$name: not a Debian package this machine knows"
  fi
done <"$pkgfile"
ok "listed: $(printf "%s\n" "${!listed_lib[@]}" | sort | paste -sd" ") + extra: $(printf "%s\n" "${!listed_extra[@]}" | sort | paste -sd" ")"

# The package that ships a library path; dpkg records merged-/usr paths either way.
owner() {
  local p=$1 c out
  for c in "$p" "/usr$p" "${p#/usr}" "$(readlink -f "$p")"; do
    out=$(dpkg -S "$c" 2>/dev/null | head -1) || continue
    [[ -n $out ]] && { echo "${out%%:*}"; return 0; }
  done
  return 1
}

# Installed packages reachable through Depends/Pre-Depends from the arguments.
dep_closure() {
  local -A seen=()
  local queue=("$@") p deps alt name
  while ((${#queue[@]})); do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -n ${seen[$p]:-} ]] && continue
    seen[$p]=1
    deps=$(dpkg-query -W -f='${Depends}, ${Pre-Depends}' "$p" 2>/dev/null) || continue
    while IFS= read -r alt; do
      name=${alt%%[ (]*}
      name=${name%%:*}
      [[ -z $name ]] && continue
      dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q 'install ok installed' && queue+=("$name")
    done < <(printf '%s\n' "${deps//[,|]/$'\n'}" | sed 's/^ *//')
  done
  printf '%s\n' "${!seen[@]}"
}

ldd_out=$(ldd "$bin" 2>&1)
if grep -q 'not found' <<<"$ldd_out"; then
  fail "ldd: unresolved libraries: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t' ' ')"
fi
declare -A path_of=()
while read -r soname _ path _; do
  [[ $path == /* ]] && path_of[$soname]=$path
  # the dynamic loader is listed by its path alone: "/lib64/ld-linux-x86-64.so.2 (0x...)"
  [[ $soname == /* ]] && path_of[${soname##*/}]=$soname
done <<<"$ldd_out"

declare -A needed_pkg=()
mapfile -t needed < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
((${#needed[@]})) || fail "readelf found no NEEDED entries in $bin"
for soname in "${needed[@]}"; do
  path=${path_of[$soname]:-}
  if [[ -z $path ]]; then fail "$soname: ldd does not resolve it"; continue; fi
  if ! pkg=$(owner "$path"); then fail "$soname ($path): no Debian package owns it"; continue; fi
  needed_pkg[$pkg]=1
  if [[ $pkg == libc6 ]]; then
    ok "$soname <- libc6 (in every Debian image)"
  elif [[ -n ${listed_lib[$pkg]:-} ]]; then
    ok "$soname <- $pkg"
  else
    fail "$soname <- $pkg, which runtime-packages.txt does not list (missing)"
  fi
done
for pkg in "${!listed_lib[@]}"; do
  [[ -n ${needed_pkg[$pkg]:-} ]] || fail "$pkg is listed but the binary links no library from it (superfluous; tag it 'extra:' if needed otherwise)"
done

mapfile -t closure < <(dep_closure libc6 "${!listed_lib[@]}")
declare -A in_closure=()
for p in "${closure[@]}"; do in_closure[$p]=1; done
indirect_bad=0
for soname in "${!path_of[@]}"; do
  path=${path_of[$soname]}
  if ! pkg=$(owner "$path"); then
    fail "$path (loaded by ldd) belongs to no Debian package"
    indirect_bad=$((indirect_bad + 1))
  elif [[ -z ${in_closure[$pkg]:-} ]]; then
    fail "$path <- $pkg, which is not a dependency of the listed packages"
    indirect_bad=$((indirect_bad + 1))
  fi
done
((indirect_bad)) || ok "all ${#path_of[@]} libraries ldd loads come from the listed packages or their dependencies"

# ---------------------------------------------------------------------------
step "5. start the installed binary with the container config, no Redis"
read -r port admin_port dead_port < <(python3 - <<'PY'
import socket
socks = []
for _ in range(3):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
PY
)
run=$tmp/run
mkdir -p "$run"
chmod 777 "$run"
runconf=$run/idempotency-proxy.yaml
sed -e "s|^listen: 0\.0\.0\.0:8080\$|listen: 127.0.0.1:$port|" \
  -e "s|^admin_listen: 0\.0\.0\.0:9901\$|admin_listen: 127.0.0.1:$admin_port|" \
  -e "s|^\(  url: \)redis://[^ ]*|\1redis://127.0.0.1:$dead_port/0|" "$conf" >"$runconf"
chmod 644 "$runconf"
if grep -q "^listen: 127.0.0.1:$port\$" "$runconf" && grep -q "^admin_listen: 127.0.0.1:$admin_port\$" "$runconf" &&
  grep -q "redis://127.0.0.1:$dead_port/0" "$runconf"; then
  ok "config: listen 127.0.0.1:$port, admin 127.0.0.1:$admin_port, redis on closed port $dead_port"
else
  fail "could not move the container config's listen/admin_listen/redis.url (expected 0.0.0.0:8080, 0.0.0.0:9901, redis://...)"
  finish
fi

as_image_user=()
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null; then
  as_image_user=(setpriv --reuid="$image_uid" --regid="$image_uid" --clear-groups --)
  note "running as uid $image_uid (the image's USER)"
else
  note "running as $(id -un) (not root, or no setpriv: cannot switch to uid $image_uid)"
fi
REDIS_PASSWORD=recipe-check "${as_image_user[@]}" "$bin" -c "$runconf" >"$run/stdout.log" 2>"$run/stderr.log" &
proxy_pid=$!

code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$@"; }
healthz=000
for _ in $(seq 1 50); do
  healthz=$(code "http://127.0.0.1:$admin_port/healthz")
  [[ $healthz == 200 ]] && break
  kill -0 "$proxy_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ $healthz == 200 ]]; then
  ok "GET /healthz -> 200"
else
  fail "GET /healthz -> $healthz; proxy stderr:"
  sed 's/^/        /' "$run/stderr.log" | tail -20
fi
if kill -0 "$proxy_pid" 2>/dev/null; then
  readyz=$(code "http://127.0.0.1:$admin_port/readyz")
  if [[ $readyz == 503 ]]; then ok "GET /readyz -> 503 (no Redis)"; else fail "GET /readyz -> $readyz, expected 503 without Redis"; fi

  # The Dockerfile's HEALTHCHECK, exactly as written, with the admin port moved.
  hc_json=$(sed -n '/^HEALTHCHECK/,/CMD/{s/.*CMD[[:space:]]*\(\[.*\]\)[[:space:]]*$/\1/p}' "$src/docker/Dockerfile")
  mapfile -t hc_cmd < <(python3 -c 'import json,sys; [print(a) for a in json.loads(sys.argv[1])]' "$hc_json" 2>/dev/null)
  if ((${#hc_cmd[@]})); then
    hc_cmd=("${hc_cmd[@]//127.0.0.1:9901/127.0.0.1:$admin_port}")
    if "${hc_cmd[@]}" >/dev/null 2>&1; then ok "HEALTHCHECK ${hc_json} succeeds"; else fail "HEALTHCHECK ${hc_json} fails"; fi
  else
    fail "no exec-form HEALTHCHECK CMD [...] found in docker/Dockerfile"
  fi

  post=$(code -X POST -H 'Idempotency-Key: recipe-check' -H 'Content-Type: application/json' \
    -d '{"amount":1}' "http://127.0.0.1:$port/v1/payments")
  if [[ $post == 503 ]]; then
    ok "keyed POST /v1/payments -> 503 store-unavailable (on_store_error: reject)"
  else
    fail "keyed POST /v1/payments -> $post, expected 503 without Redis"
  fi

  kill -TERM "$proxy_pid"
  rc=
  for _ in $(seq 1 100); do
    kill -0 "$proxy_pid" 2>/dev/null || { wait "$proxy_pid"; rc=$?; break; }
    sleep 0.1
  done
  if [[ $rc == 0 ]]; then
    ok "SIGTERM -> exit 0"
    proxy_pid=
  else
    fail "SIGTERM -> ${rc:-still running after 10 s}"
  fi
else
  wait "$proxy_pid"
  fail "the proxy exited (status $?); stderr:"
  sed 's/^/        /' "$run/stderr.log" | tail -20
  proxy_pid=
fi

# ---------------------------------------------------------------------------
step "6. lint"
dockerfile=$src/docker/Dockerfile
if command -v hadolint >/dev/null; then
  if hadolint "$dockerfile"; then ok "hadolint docker/Dockerfile"; else fail "hadolint docker/Dockerfile"; fi
else
  if apt-cache policy hadolint 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    note "hadolint is packaged here but not installed (apt-get install hadolint); built-in checks instead"
  else
    note "hadolint: not available (Debian 12 has no hadolint package); built-in Dockerfile checks instead"
  fi
  froms=$(grep -E '^FROM ' "$dockerfile")
  if grep -qE '^FROM [^ :]+( |$)|:latest' <<<"$froms"; then
    fail "a FROM without an explicit tag, or :latest"
  else
    ok "FROM lines are tagged: $(awk '{print $2}' <<<"$froms" | paste -sd' ')"
  fi
  runtime=$(awk '/^FROM /{n++} n==2' "$dockerfile")
  if grep -q 'apt-get install.*--no-install-recommends' <<<"$runtime" &&
    grep -q 'rm -rf /var/lib/apt/lists/\*' <<<"$runtime" && grep -q 'runtime-packages.txt' <<<"$runtime"; then
    ok "runtime stage installs runtime-packages.txt --no-install-recommends and removes the apt lists"
  else
    fail "runtime stage must install runtime-packages.txt with --no-install-recommends and rm -rf /var/lib/apt/lists/*"
  fi
  user=$(grep -E '^USER ' "$dockerfile" | tail -1 | awk '{print $2}')
  if [[ $user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]]; then ok "USER $user (numeric, not root)"; else fail "last USER '$user' must be a numeric non-root uid"; fi
  if grep -q '^SHELL \["/bin/bash", "-o", "pipefail"' "$dockerfile"; then
    ok "RUN pipes fail (SHELL with pipefail)"
  else
    fail "RUN lines with pipes need SHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"]"
  fi
fi
if command -v shellcheck >/dev/null; then
  if shellcheck "$src"/docker/*.sh; then ok "shellcheck docker/*.sh"; else fail "shellcheck docker/*.sh"; fi
else
  note "shellcheck not installed; skipped"
fi

finish
