#!/usr/bin/env bash
# Builds docker/Dockerfile with podman and runs the demo through the container,
# on a Debian 12 machine with no Docker engine and no image registry:
#
#   1. the base images: debian:bookworm and debian:bookworm-slim, made from
#      Debian's packages with mmdebstrap (minbase; slim also drops man pages,
#      locales and docs but the copyright files) and imported with
#      `podman import` under the names the Dockerfile uses. The tarballs are
#      cached in $IDEM_IMAGE_CACHE (default ~/.cache/idempotency-proxy-image),
#      one per recipe and day: a new day or a changed recipe makes new ones;
#   2. podman build --format docker (keeps HEALTHCHECK) --network host (the
#      build stage's apt reaches Debian's mirror) --pull=never;
#   3. the image: USER, HEALTHCHECK, STOPSIGNAL, ports; the install tree; -V
#      and -t -c on the baked-in config (with an admin token file mounted where
#      it points, and refused without one); docker/runtime-packages.txt against
#      the libraries the binary links inside the image;
#   4. the container as compose runs it (read-only root, no capabilities,
#      no-new-privileges) with the image's own config and CMD, in a network
#      namespace of its own where `redis` and `payments-api` name 127.0.0.1
#      (a pod's view): first without Redis (/healthz 200, /readyz 503 on the
#      health port, the HEALTHCHECK passes, a keyed POST gets 503), then with
#      redis-server and tests/upstream/payments_api.py started in that
#      namespace: one payment
#      sent three times with one key executes once and gets three identical
#      answers, the retries with Idempotent-Replayed: true; the admin endpoints
#      behind the token answer 401 without it and work with it (the record the
#      image's `record-id` names), the probes and /metrics need none on the
#      health port and are not the admin port's; the operator CLI,
#      run in the container (`podman exec`, as `kubectl exec` does), lists an
#      outcome-unknown record and resolves it, and the retry replays the
#      resolution. The process runs as uid/gid 10001;
#   5. podman stop (the image's STOPSIGNAL, SIGTERM) while a slow payment is
#      in flight: that payment is answered, the container exits 0.
#
#   docker/test-image.sh [--keep]    --keep leaves the temp dir (podman storage, logs)
#
# Needs root (rootful podman, network namespaces), podman, runc, mmdebstrap,
# redis-server, python3, curl, iproute2, binutils (tests/install-deps.sh
# --tests installs them). Rootful podman here runs with runc (crun refuses
# a hybrid cgroup v1/v2 host), its own storage in the temp dir (never the
# machine's images) and its own containers.conf without default_ulimits (the
# default nofile limit is more than an unprivileged-looking host grants).
# Exits 0 when every check passed, 1 otherwise; the last line says which.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
keep=false
[[ ${1:-} == --keep ]] && keep=true
cache=${IDEM_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idempotency-proxy-image}
mirror=${IDEM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${IDEM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
image=localhost/idempotency-proxy:test
image_uid=10001
config_path=/etc/idempotency-proxy/idempotency-proxy.yaml

failures=0
started=$(date +%s)
step_started=$started
step() {
  local now
  now=$(date +%s)
  printf '\n== %s  (at %ds)\n' "$*" $((now - started))
  step_started=$now
}
took() { echo "$(($(date +%s) - step_started)) s"; }
ok() { printf '  ok    %s\n' "$*"; }
fail() { printf '  FAIL  %s\n' "$*"; failures=$((failures + 1)); }
note() { printf '  note  %s\n' "$*"; }
finish() {
  echo
  echo "image test took $(($(date +%s) - started)) s"
  if ((failures)); then
    echo "image test: FAILED ($failures problem(s))"
    exit 1
  fi
  echo "image test: OK"
  exit 0
}

if [[ $(id -u) -ne 0 ]]; then
  fail "needs root (rootful podman, ip netns)"
  finish
fi
missing=()
for tool in podman mmdebstrap redis-server python3 curl ip readelf; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  fail "not installed: ${missing[*]} (tests/install-deps.sh --tests)"
  finish
fi

tmp=$(mktemp -d /var/tmp/idem-image-test.XXXXXX)
chmod 755 "$tmp"
ns=idem-image-$$
container=idem-image-$$
pids=()
ns_made=false
mnt=

pod() { podman --root "$tmp/storage" --runroot "$tmp/run" --tmpdir "$tmp/libpod" "$@"; }
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pid m
  pod rm -f -t 0 "$container" >/dev/null 2>&1
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  if $ns_made; then
    # anything still in the namespace was started by this script
    for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null; done
    ip netns delete "$ns"
  fi
  [[ -n $mnt ]] && pod image unmount "$image" >/dev/null 2>&1
  if $keep; then
    echo "kept $tmp (podman --root $tmp/storage --runroot $tmp/run --tmpdir $tmp/libpod; CONTAINERS_CONF=$tmp/containers.conf)"
    return
  fi
  pod rm -a -f >/dev/null 2>&1
  pod rmi -a -f >/dev/null 2>&1
  # whatever overlay mounts podman left behind, deepest first
  while read -r m; do umount "$m" 2>/dev/null; done < <(findmnt -rn -o TARGET | grep "^$tmp/" | sort -r)
  rm -rf "$tmp"
}
trap cleanup EXIT

# podman's own configuration for this run: runc, no default ulimits, no systemd.
export CONTAINERS_CONF=$tmp/containers.conf
{
  echo '[containers]'
  echo 'default_ulimits = []'
  echo '[engine]'
  echo 'cgroup_manager = "cgroupfs"'
  echo 'events_logger = "file"'
  command -v runc >/dev/null && echo 'runtime = "runc"'
} >"$CONTAINERS_CONF"
command -v runc >/dev/null || note "runc not installed: podman's default runtime (crun refuses hybrid cgroup hosts)"

# ---------------------------------------------------------------------------
step "1. base images debian:bookworm, debian:bookworm-slim (cache $cache)"
mkdir -p "$cache"
sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main"
  "deb $security_mirror bookworm-security main")
# The mmdebstrap options of base image $1, NUL-separated. minbase is the
# variant Debian's official images start from; -slim keeps the copyright files
# and locale.alias of what it drops, and the dpkg options stay in the image,
# so packages installed later are trimmed the same way.
base_options() {
  local o=(--variant=minbase --format=tar)
  if [[ $1 == bookworm-slim ]]; then
    o+=(--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright')
  fi
  printf '%s\0' "${o[@]}"
}
declare -A tarball=() making=()
today=$(date -u +%Y%m%d)
for tag in bookworm bookworm-slim; do
  mapfile -d '' -t opts < <(base_options "$tag")
  key=$({ mmdebstrap --version; printf '%s\n' "${opts[@]}" "${sources[@]}"; } | sha256sum | cut -c1-12)
  tarball[$tag]=$cache/debian-$tag-$key-$today.tar
  if [[ -s ${tarball[$tag]} ]]; then
    ok "debian:$tag from the cache: ${tarball[$tag]##*/}"
    continue
  fi
  # both at once: they wait on the mirror more than on the CPU
  (mmdebstrap "${opts[@]}" bookworm "${tarball[$tag]}.$$.part" "${sources[@]}" </dev/null \
    >"$tmp/mmdebstrap-$tag.log" 2>&1 && mv "${tarball[$tag]}.$$.part" "${tarball[$tag]}") &
  making[$tag]=$!
done
for tag in "${!making[@]}"; do
  if wait "${making[$tag]}"; then
    ok "debian:$tag made by mmdebstrap ($(du -m "${tarball[$tag]}" | cut -f1) MB): ${tarball[$tag]##*/}"
    find "$cache" -maxdepth 1 -name "debian-$tag-*.tar*" ! -name "${tarball[$tag]##*/}" -delete
  else
    fail "mmdebstrap debian:$tag failed; the end of its log:"
    tail -20 "$tmp/mmdebstrap-$tag.log" | sed 's/^/        /'
    rm -f "${tarball[$tag]}.$$.part"
  fi
done
((failures)) && finish
for tag in bookworm bookworm-slim; do
  # the name the Dockerfile's FROM resolves to, so no registry is ever asked
  if pod import --change 'CMD ["bash"]' "${tarball[$tag]}" "docker.io/library/debian:$tag" >"$tmp/import.log" 2>&1; then
    ok "podman import -> docker.io/library/debian:$tag"
  else
    fail "podman import debian:$tag: $(tail -3 "$tmp/import.log")"
  fi
done
((failures)) && finish
ok "took $(took)"

# ---------------------------------------------------------------------------
step "2. podman build --format docker -f docker/Dockerfile (log: $tmp/build.log)"
if nice -n 5 podman --root "$tmp/storage" --runroot "$tmp/run" --tmpdir "$tmp/libpod" \
  build --pull=never --network host --format docker \
  --ignorefile "$root/docker/Dockerfile.dockerignore" \
  -f "$root/docker/Dockerfile" -t "$image" "$root" >"$tmp/build.log" 2>&1; then
  ok "built $image ($(pod image inspect --format '{{.Size}}' "$image" | awk '{printf "%d MB", $1 / 1e6}')) in $(took)"
else
  fail "podman build failed; the end of its log:"
  tail -40 "$tmp/build.log" | sed 's/^/        /'
  finish
fi

# ---------------------------------------------------------------------------
step "3. the image"
inspect() { pod image inspect --format "$1" "$image" 2>&1; }
user=$(inspect '{{.Config.User}}')
if [[ $user == "$image_uid:$image_uid" ]]; then ok "USER $user"; else fail "USER is '$user', expected $image_uid:$image_uid"; fi
healthcheck=$(inspect '{{json .Config.Healthcheck.Test}}')
if [[ $healthcheck == *'"curl"'*'/healthz"'* ]]; then
  ok "HEALTHCHECK kept: $healthcheck"
else
  fail "HEALTHCHECK missing or not the Dockerfile's (--format docker keeps it): $healthcheck"
fi
stopsignal=$(inspect '{{.Config.StopSignal}}')
if [[ $stopsignal == SIGTERM ]]; then ok "STOPSIGNAL SIGTERM"; else fail "STOPSIGNAL is '$stopsignal'"; fi
# shellcheck disable=SC2016  # a Go template, not shell
ports=$(inspect '{{range $p, $v := .Config.ExposedPorts}}{{$p}} {{end}}')
if [[ $ports == "8080/tcp 9901/tcp 9902/tcp " ]]; then ok "EXPOSE $ports"; else fail "exposed ports: '$ports', expected 8080/tcp 9901/tcp 9902/tcp"; fi

if mnt=$(pod image mount "$image" 2>&1) && [[ -d $mnt/usr ]]; then
  bin=$mnt/usr/local/bin/idempotency-proxy
  if cmp -s "$mnt$config_path" "$root/docker/idempotency-proxy.yaml"; then
    ok "$config_path is docker/idempotency-proxy.yaml"
  else
    fail "$config_path missing or not docker/idempotency-proxy.yaml"
  fi
  for f in /usr/local/share/doc/idempotency-proxy/idempotency-proxy.yaml /usr/local/share/doc/idempotency-proxy/LICENSE \
    /usr/share/doc/libhiredict1.3.1/copyright; do
    if [[ -s $mnt$f ]]; then ok "$f"; else fail "no $f"; fi
  done
  if [[ -e $mnt/usr/bin/gcc || -e $mnt/usr/bin/meson ]]; then fail "build tools in the runtime image"; else ok "no build tools in the runtime image"; fi

  # docker/runtime-packages.txt against the binary, inside the image: every
  # library the binary links (ELF NEEDED) comes from a listed package (or
  # libc6), and every listed library package provides one of them.
  declare -A listed_lib=() listed_extra=() needed_pkg=()
  while IFS= read -r line; do
    name=${line%%#*}
    name=${name//[[:space:]]/}
    [[ -z $name ]] && continue
    if [[ $line =~ \#[[:space:]]*extra: ]]; then listed_extra[$name]=1; else listed_lib[$name]=1; fi
    # shellcheck disable=SC2016  # dpkg-query's format, not shell
    chroot "$mnt" dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q 'install ok installed' ||
      fail "$name (runtime-packages.txt) is not installed in the image"
  done <"$root/docker/runtime-packages.txt"
  ldd_out=$(chroot "$mnt" ldd /usr/local/bin/idempotency-proxy 2>&1)
  if grep -q 'not found' <<<"$ldd_out"; then
    fail "ldd in the image: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t' ' ')"
  fi
  declare -A path_of=()
  while read -r soname _ path _; do
    [[ $path == /* ]] && path_of[$soname]=$path
  done <<<"$ldd_out"
  # The package that ships a library path; dpkg records merged-/usr paths either way.
  owner() {
    local c out
    for c in "$1" "/usr$1" "${1#/usr}" "$(chroot "$mnt" readlink -f "$1")"; do
      out=$(chroot "$mnt" dpkg-query -S "$c" 2>/dev/null | head -1) || continue
      [[ -n $out ]] && { echo "${out%%:*}"; return 0; }
    done
    return 1
  }
  mapfile -t needed < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  ((${#needed[@]})) || fail "readelf found no NEEDED entries in /usr/local/bin/idempotency-proxy"
  for soname in "${needed[@]}"; do
    path=${path_of[$soname]:-}
    if [[ -z $path ]]; then fail "$soname: ldd in the image does not resolve it"; continue; fi
    if ! pkg=$(owner "$path"); then fail "$soname ($path): no package in the image owns it"; continue; fi
    needed_pkg[$pkg]=1
    if [[ $pkg != libc6 && -z ${listed_lib[$pkg]:-} ]]; then
      fail "$soname <- $pkg, which runtime-packages.txt does not list"
    fi
  done
  for pkg in "${!listed_lib[@]}"; do
    [[ -n ${needed_pkg[$pkg]:-} ]] || fail "$pkg is listed but the binary links no library from it (tag it 'extra:' if needed otherwise)"
  done
  ok "runtime-packages.txt: ${#needed[@]} linked libraries from $(printf '%s\n' "${!needed_pkg[@]}" | sort | paste -sd' ')" \
    "+ extra: $(printf '%s\n' "${!listed_extra[@]}" | sort | paste -sd' ')"
  pod image unmount "$image" >/dev/null
  mnt=
else
  fail "podman image mount: $mnt"
  mnt=
fi

# admin.token_file of the image's config, mounted as compose and the Kubernetes Secret mount it
admin_token_path=$(sed -n 's/^ *token_file: *\(.*\)$/\1/p' "$root/docker/idempotency-proxy.yaml")
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$tmp/admin-token"
chmod 644 "$tmp/admin-token" # the image's uid reads it, as from a Secret volume
admin_token=$(cat "$tmp/admin-token")
token_mount=(-v "$tmp/admin-token:$admin_token_path:ro")
want_version=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$root/meson.build" | head -1)
# stdout only: podman says on stderr that it has no systemd for the HEALTHCHECK's timer
once() { pod run --rm --network none "$@" 2>"$tmp/once.err"; }
version=$(once "$image" -V)
if [[ $version == "idempotency-proxy $want_version" ]]; then ok "-V: $version"; else fail "-V: '$version', expected idempotency-proxy $want_version (meson.build); $(tail -3 "$tmp/once.err")"; fi
checked=$(once -e REDIS_PASSWORD=x "${token_mount[@]}" "$image" -t -c "$config_path")
if [[ $checked == "configuration OK" ]]; then ok "-t -c $config_path with $admin_token_path mounted: $checked"; else fail "-t -c $config_path: '$checked'; $(tail -3 "$tmp/once.err")"; fi
once -e REDIS_PASSWORD=x "$image" -t -c "$config_path" >/dev/null
if grep -q "admin.token_file: $admin_token_path: cannot open" "$tmp/once.err"; then
  ok "-t without the admin token file: refused ($(grep -o 'admin.token_file: .*' "$tmp/once.err" | head -1))"
else
  fail "-t without $admin_token_path: not refused for it; $(tail -3 "$tmp/once.err")"
fi
ok "took $(took)"

# ---------------------------------------------------------------------------
step "4. the demo through the container (network namespace $ns)"
if ! ip netns add "$ns" || ! ip netns exec "$ns" ip link set lo up; then
  fail "cannot make network namespace $ns"
  finish
fi
ns_made=true
in_ns() { ip netns exec "$ns" "$@"; }
code() { in_ns curl -s -o /dev/null -m 5 -w '%{http_code}' "$@"; }
# Polls `code URL` until it prints $1, for at most $2 seconds; prints the last code.
await_code() {
  local want=$1 secs=$2 got=000 deadline
  shift 2
  deadline=$(($(date +%s) + secs))
  while :; do
    got=$(code "$@")
    [[ $got == "$want" || $(date +%s) -ge $deadline ]] && break
    sleep 0.2
  done
  echo "$got"
}
password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
# compose's proxy service: read-only root, no capabilities, no-new-privileges.
# The image's HEALTHCHECK still runs on `podman healthcheck run`.
if ! pod run -d --name "$container" --network "ns:/run/netns/$ns" \
  --add-host redis:127.0.0.1 --add-host payments-api:127.0.0.1 \
  --read-only --cap-drop ALL --security-opt no-new-privileges "${token_mount[@]}" \
  -e REDIS_PASSWORD="$password" "$image" >"$tmp/run.log" 2>&1; then
  fail "podman run: $(tail -5 "$tmp/run.log")"
  finish
fi
admin=http://127.0.0.1:9901
health=http://127.0.0.1:9902
client=http://127.0.0.1:8080
logs() { pod logs "$container" 2>&1 | tail -20 | sed 's/^/        /'; }
# The demo upstream's count of executions: of key $1, or of all keys without $1.
executions() {
  local url=http://127.0.0.1:3000/_demo/stats field=total
  [[ -n ${1:-} ]] && url="http://127.0.0.1:3000/_demo/executions?key=$1" field=count
  in_ns curl -s -m 5 "$url" | python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$field" 2>/dev/null
}

healthz=$(await_code 200 30 "$health/healthz")
if [[ $healthz == 200 ]]; then ok "no Redis yet: GET /healthz -> 200"; else fail "GET /healthz -> $healthz; the container's log:"; logs; finish; fi
readyz=$(code "$health/readyz")
if [[ $readyz == 503 ]]; then ok "no Redis yet: GET /readyz -> 503"; else fail "no Redis yet: GET /readyz -> $readyz, expected 503"; fi
if pod healthcheck run "$container" >"$tmp/health.log" 2>&1; then
  ok "podman healthcheck run (the image's HEALTHCHECK) passes without Redis: /healthz is liveness"
else
  fail "podman healthcheck run: $(cat "$tmp/health.log")"
fi
post=$(code -X POST -H 'Idempotency-Key: before-redis' -H 'Content-Type: application/json' -d '{"amount":1}' "$client/v1/payments")
if [[ $post == 503 ]]; then ok "no Redis yet: keyed POST -> 503 (on_store_error: reject)"; else fail "no Redis yet: keyed POST -> $post, expected 503"; fi

pid=$(pod inspect --format '{{.State.Pid}}' "$container")
uids=$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status" 2>/dev/null)
gids=$(awk '/^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status" 2>/dev/null)
all_image_uid="$image_uid $image_uid $image_uid $image_uid"
if [[ $uids == "$all_image_uid" && $gids == "$all_image_uid" ]]; then
  ok "the proxy (host pid $pid) runs as uid/gid $image_uid (real, effective, saved, fs)"
else
  fail "the proxy (host pid $pid) runs as Uid '$uids' Gid '$gids', expected $image_uid"
fi

mkdir -p "$tmp/redis"
# ip netns exec execs the command: $! is the server's pid (in_ns would fork a subshell)
ip netns exec "$ns" redis-server --port 6379 --bind 127.0.0.1 --dir "$tmp/redis" --save '' \
  --appendonly yes --appendfsync everysec --requirepass "$password" >"$tmp/redis/log" 2>&1 &
pids+=($!)
ip netns exec "$ns" /usr/bin/python3 "$root/tests/upstream/payments_api.py" --listen 127.0.0.1:3000 >"$tmp/upstream.log" 2>&1 &
pids+=($!)
readyz=$(await_code 200 30 "$health/readyz")
if [[ $readyz == 200 ]]; then ok "redis-server and payments_api.py up: GET /readyz -> 200"; else fail "GET /readyz -> $readyz with Redis up; the container's log:"; logs; finish; fi

key=pay-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
for i in 1 2 3; do
  in_ns curl -s -m 20 -D "$tmp/answer$i.head" -o "$tmp/answer$i.body" -H "Idempotency-Key: $key" \
    -H 'Content-Type: application/json' -d '{"amount":4200,"currency":"eur"}' "$client/v1/payments" ||
    fail "POST $i: curl failed"
done
status() { head -1 "$1" 2>/dev/null | tr -d '\r'; }
replayed() { grep -i '^Idempotent-Replayed:' "$1" 2>/dev/null | tr -d '\r' | sed 's/^[^:]*: *//'; }
for i in 1 2 3; do
  [[ $(status "$tmp/answer$i.head") == "HTTP/1.1 201 Created" ]] ||
    fail "answer $i: $(status "$tmp/answer$i.head"), expected HTTP/1.1 201 Created: $(head -c 300 "$tmp/answer$i.body" 2>/dev/null)"
done
if [[ -z $(replayed "$tmp/answer1.head") && $(replayed "$tmp/answer2.head") == true && $(replayed "$tmp/answer3.head") == true ]]; then
  ok "answer 1 is the upstream's, answers 2 and 3 carry Idempotent-Replayed: true"
else
  fail "Idempotent-Replayed: '$(replayed "$tmp/answer1.head")' '$(replayed "$tmp/answer2.head")' '$(replayed "$tmp/answer3.head")', expected '' 'true' 'true'"
fi
if [[ -s $tmp/answer1.body ]] && cmp -s "$tmp/answer1.body" "$tmp/answer2.body" && cmp -s "$tmp/answer1.body" "$tmp/answer3.body"; then
  ok "three identical bodies: $(head -c 120 "$tmp/answer1.body")"
else
  fail "the bodies differ (or are empty)"
fi
of_key=$(executions "$key")
total=$(executions)
if [[ $of_key == 1 && $total == 1 ]]; then
  ok "the upstream executed once (count of the key 1, 1 execution in all)"
else
  fail "the upstream executed the key '$of_key' times, '$total' in all, expected 1 and 1"
fi

# The admin endpoints behind the token: the payment's record, named by the image's own record-id.
record=$(once "${token_mount[@]}" -e REDIS_PASSWORD=x "$image" record-id -c "$config_path" --path /v1/payments --key "$key" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["record_id"])' 2>/dev/null)
auth=$(mktemp "$tmp/auth.XXXXXX")
printf 'Authorization: Bearer %s\n' "$admin_token" >"$auth"
denied=$(code "$admin/records/$record")
wrong=$(code -H 'Authorization: Bearer not-the-admin-token-0123456789abcdef' "$admin/inbox")
record_state=$(in_ns curl -s -m 5 -H @"$auth" "$admin/records/$record" | python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)
if [[ -n $record && $denied == 401 && $wrong == 401 && $record_state == "done" ]]; then
  ok "admin: GET /records/<id> and /inbox answer 401 without the token or with another; with it the record record-id names is done"
else
  fail "admin: record-id '$record', without the token $denied, another token $wrong, with the token state '$record_state' (expected 401 401 done); $(tail -3 "$tmp/once.err")"
fi
metrics=$(code "$health/metrics")
admin_metrics=$(code "$admin/metrics")
if [[ $metrics == 200 && $admin_metrics == 401 ]]; then
  ok "health: /metrics needs no token; the admin port asks the token for it (401)"
else
  fail "/metrics without a token: health port $metrics, admin port $admin_metrics (expected 200 401)"
fi

# The operator CLI inside the running container, as `kubectl exec POD -c idempotency-proxy --
# idempotency-proxy admin ...` runs it: the container's user (uid 10001), its environment, the
# read-only root filesystem, HOME=/nonexistent. A payment whose upstream closes the connection is
# held as outcome-unknown; the CLI lists it and resolves it, and the retry replays the resolution.
cli() { pod exec -e HOME=/nonexistent "$container" idempotency-proxy admin -c "$config_path" "$@" 2>>"$tmp/cli.err"; }
held_key=held-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
held_code=$(code -X POST -H "Idempotency-Key: $held_key" -H 'X-Demo-Fault: close' -H 'Content-Type: application/json' -d '{"amount":700,"currency":"eur"}' "$client/v1/payments")
held=$(once "${token_mount[@]}" -e REDIS_PASSWORD=x "$image" record-id -c "$config_path" --path /v1/payments --key "$held_key" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["record_id"])' 2>/dev/null)
listed=$(cli list --state outcome-unknown --json | python3 -c 'import json, sys; print(" ".join(r["record_id"] for r in json.load(sys.stdin)["records"]))' 2>/dev/null)
table=$(cli list --state outcome-unknown)
if [[ $held_code == 502 && -n $held && $listed == "$held" && $table == *"$held"*"outcome-unknown"* ]]; then
  ok "CLI in the container (uid $image_uid, read-only root, HOME=/nonexistent): admin list shows the outcome-unknown record $held"
else
  fail "CLI list: the held POST got '$held_code', record-id '$held', listed '$listed'; $(tail -3 "$tmp/cli.err")"
fi
resolved=$(cli resolve "$held" --status 201 --header 'Content-Type: application/json' --body '{"id":"pay_cli"}' --reason 'image test: the upstream shows pay_cli' --json |
  python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["record_id"], d["status"])' 2>/dev/null)
in_ns curl -s -m 20 -D "$tmp/resolved.head" -o "$tmp/resolved.body" -H "Idempotency-Key: $held_key" \
  -H 'Content-Type: application/json' -d '{"amount":700,"currency":"eur"}' "$client/v1/payments"
if [[ $resolved == "$held 201" && $(status "$tmp/resolved.head") == "HTTP/1.1 201 Created" &&
  $(replayed "$tmp/resolved.head") == true && $(cat "$tmp/resolved.body") == '{"id":"pay_cli"}' &&
  $(executions "$held_key") == 1 ]]; then
  ok "CLI resolve: the retry replays the resolution (201, Idempotent-Replayed: true), the upstream ran the payment once"
else
  fail "CLI resolve: '$resolved', the retry: $(status "$tmp/resolved.head") replayed '$(replayed "$tmp/resolved.head")' body '$(head -c 100 "$tmp/resolved.body")', executions $(executions "$held_key"); $(tail -3 "$tmp/cli.err")"
fi
if grep -qF "$admin_token" <<<"$listed$table$resolved" ||
  grep -qF "$admin_token" "$tmp/cli.err" || pod logs "$container" 2>&1 | grep -qF "$admin_token"; then
  fail "the admin token appears in the CLI's stderr or the container's log"
else
  ok "the admin token appears in neither the CLI's output nor the container's log"
fi

# ---------------------------------------------------------------------------
step "5. podman stop (SIGTERM) with a payment in flight"
slow_key=slow-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
in_ns curl -s -m 40 -o "$tmp/slow.body" -w '%{http_code}' -H "Idempotency-Key: $slow_key" -H 'X-Demo-Delay-Ms: 3000' \
  -H 'Content-Type: application/json' -d '{"amount":100,"currency":"eur"}' "$client/v1/payments" >"$tmp/slow.code" 2>&1 &
slow=$!
deadline=$(($(date +%s) + 20))
until [[ $(executions "$slow_key") == 1 ]]; do
  if (($(date +%s) >= deadline)); then
    fail "the slow payment did not reach the upstream within 20 s"
    break
  fi
  sleep 0.1
done
stop_started=$(date +%s)
# -t 40: compose's stop_grace_period; after it podman would SIGKILL (exit 137)
pod stop -t 40 "$container" >"$tmp/stop.log" 2>&1
stop_secs=$(($(date +%s) - stop_started))
wait "$slow"
slow_code=$(cat "$tmp/slow.code")
if [[ $slow_code == 201 ]]; then
  ok "the in-flight payment (upstream delay 3 s) was answered 201 after SIGTERM"
else
  fail "the in-flight payment got '$slow_code' ($(head -c 200 "$tmp/slow.body")), expected 201: SIGTERM did not drain it"
fi
state=$(pod inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$container" 2>&1)
if [[ $state == "exited 0" ]]; then
  ok "the container exited 0, $stop_secs s after podman stop"
else
  fail "after podman stop: '$state' (137 is SIGKILL after the grace period); $(cat "$tmp/stop.log")"
fi
# the whole log first: grep -q stops reading at its match, and pipefail would count the
# writer's SIGPIPE as a failure
stop_log=$(pod logs "$container" 2>&1)
if grep -q 'SIGTERM: draining 1 requests in flight' <<<"$stop_log"; then
  ok "the log says: SIGTERM: draining 1 requests in flight"
else
  fail "no 'SIGTERM: draining 1 requests in flight' in the container's log:"
  logs
fi

finish
