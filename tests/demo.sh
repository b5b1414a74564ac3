#!/usr/bin/env bash
# The quick-start demo: install, build, start Redis, the demo "legacy payments
# API" and the proxy with conf/idempotency-proxy.yaml, then send one payment
# three times with one idempotency key and show that it executed once.
#
#   tests/demo.sh           run the demo, then stop everything it started
#   tests/demo.sh --keep    leave Redis, the upstream and the proxy running
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
keep=false
case $# in
  0) ;;
  1) [[ $1 == --keep ]] && keep=true ;;
esac
if (($# > 1)) || { (($# == 1)) && ! $keep; }; then
  echo "usage: tests/demo.sh [--keep]" >&2
  exit 2
fi

"$root/tests/install-deps.sh"
[[ -d build ]] || meson setup build >/dev/null
ninja -C build >/dev/null
bin="$root/build/proxy/idempotency-proxy"
conf="$root/conf/idempotency-proxy.yaml"
"$bin" -t -c "$conf"

run=$(mktemp -d /tmp/idempotency-demo.XXXXXX)
pids=()
cleanup() {
  $keep && return
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 100); do port_busy "$1" && return 0; sleep 0.1; done
  echo "nothing listens on port $1; see $run/*.log" >&2
  return 1
}

# Redis at the address conf/ names (127.0.0.1:6379): reuse a running one, else start one.
if redis-cli -p 6379 ping >/dev/null 2>&1; then
  echo "redis: using the redis-server already on 127.0.0.1:6379"
else
  redis-server --port 6379 --bind 127.0.0.1 --dir "$run" --save '' --appendonly no \
    >"$run/redis.log" 2>&1 &
  pids+=($!)
  wait_port 6379
  echo "redis: started on 127.0.0.1:6379"
fi
for port in 3000 8080 9901; do
  if port_busy "$port"; then echo "port $port is in use; stop what holds it and run again" >&2; exit 1; fi
done
/usr/bin/python3 "$root/tests/upstream/payments_api.py" --listen 127.0.0.1:3000 >"$run/upstream.log" 2>&1 &
pids+=($!)
"$bin" -c "$conf" >"$run/access.log" 2>"$run/proxy.log" &
pids+=($!)
wait_port 3000
wait_port 8080
# ready: Redis connected, and the re-assertion grace of its first connection over
for _ in $(seq 1 100); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9901/readyz) == 200 ]] && break
  sleep 0.1
done
echo "upstream: demo payments API on 127.0.0.1:3000; proxy on 0.0.0.0:8080 as conf/ says (admin 127.0.0.1:9901)"

key="demo-$(date +%s)-$RANDOM"
body='{"amount":4200,"currency":"eur","customer":"cus_demo","description":"order 42"}'
pay() { # $1 = output file; the upstream takes 2 s for every execution of this payment
  curl -sS -D "$1.headers" -o "$1.body" -X POST http://127.0.0.1:8080/v1/payments \
    -H "Idempotency-Key: $key" -H 'Content-Type: application/json' -H 'X-Demo-Delay-Ms: 2000' \
    --data-binary "$body"
}
echo
echo "POST /v1/payments three times with Idempotency-Key: $key (the upstream takes 2 s):"
pay "$run/first" & first=$!
sleep 0.5
pay "$run/second"           # while the first is still running: waits for its answer
wait "$first"
pay "$run/third"            # after it finished: replayed from Redis
for n in first second third; do
  status=$(head -1 "$run/$n.headers" | tr -d '\r')
  replayed=$(grep -i '^Idempotent-Replayed:' "$run/$n.headers" | tr -d '\r' || true)
  printf '  %-7s %s  %-26s %s\n' "$n" "$status" "${replayed:-(original)}" "$(cat "$run/$n.body")"
done
executions=$(curl -s "http://127.0.0.1:3000/_demo/executions?key=$key")
echo
echo "upstream executions for this key: $executions"
if cmp -s "$run/first.body" "$run/second.body" && cmp -s "$run/first.body" "$run/third.body" &&
   [[ $executions == *'"count": 1'* ]]; then
  echo "OK: one order created, three identical answers."
else
  echo "UNEXPECTED: see $run; left running (pids ${pids[*]}); stop them with: kill ${pids[*]}" >&2
  keep=true
  exit 1
fi
if $keep; then
  echo "still running (pids ${pids[*]}); logs in $run; stop them with: kill ${pids[*]}"
fi
