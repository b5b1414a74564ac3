#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, then builds and
# tests three times: plain with -Werror; under AddressSanitizer +
# UndefinedBehaviorSanitizer; under ThreadSanitizer with every proxy running
# two worker threads (IDEM_TEST_WORKERS=2). Each: unit tests via meson,
# integration tests via pytest against the real binary, a real redis-server
# and the demo upstream (the topology scenarios: plain only). Then the
# store's tests once more against valkey-server. Ends with one line
# "N passed, N failed".
#
#   tests/run.sh            all variants
#   tests/run.sh plain      one variant (plain | asan | tsan)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/tests/install-deps.sh" --tests || { echo "0 passed, 1 failed"; exit 1; }

variants=("$@")
((${#variants[@]})) || variants=(plain asan tsan)
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
build_failures=0

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=0}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:report_signal_unsafe=0:suppressions=$root/tests/tsan.supp}

for v in "${variants[@]}"; do
  dir="build-test-$v"
  opts=(-Dwerror=true -Dbuildtype=debugoptimized)
  [[ $v == asan ]] && opts+=(-Db_sanitize=address,undefined -Db_lundef=false)
  [[ $v == tsan ]] && opts+=(-Db_sanitize=thread -Db_lundef=false)
  workers=
  [[ $v == tsan ]] && workers=2
  echo "=== $v: build"
  if ! { [[ -d $dir ]] || meson setup "$dir" "${opts[@]}" >/dev/null; } || ! ninja -C "$dir" >/dev/null; then
    echo "build $v failed"
    ninja -C "$dir" 2>&1 | tail -40
    build_failures=$((build_failures + 1))
    continue
  fi
  echo "=== $v: unit tests"
  meson test -C "$dir" --suite unit --print-errorlogs --no-rebuild
  cp "$dir/meson-logs/testlog.junit.xml" "$results/unit-$v.xml" 2>/dev/null
  echo "=== $v: integration tests"
  # the topology scenarios (failover, resharding, slow receivers) run once, in the plain variant
  select=()
  [[ $v != plain ]] && select=(-m "not topology")
  IDEM_PROXY_BIN="$root/$dir/proxy/idempotency-proxy" IDEM_TEST_WORKERS="$workers" \
    /usr/bin/python3 -m pytest -q tests/integration "${select[@]}" \
    --junitxml="$results/integration-$v.xml" -o junit_suite_name="integration-$v"
done

# The store's tests once more against valkey-server 8 (bookworm-backports), the server several
# managed offerings now run: the production-Redis and store-fault files, and the Redis tests of
# the main file.
if [[ " ${variants[*]} " == *" plain "* && -x build-test-plain/proxy/idempotency-proxy ]]; then
  echo "=== valkey: the store's tests against valkey-server"
  IDEM_REDIS_SERVER=valkey-server IDEM_PROXY_BIN="$root/build-test-plain/proxy/idempotency-proxy" \
    /usr/bin/python3 -m pytest -q tests/integration/test_redis_production.py \
    tests/integration/test_store_faults.py tests/integration/test_proxy.py \
    -k "test_redis_production or test_store_faults or redis or readyz or purge or records or claim_that_lands or sigterm_waits_to_release" \
    --junitxml="$results/integration-valkey.xml" -o junit_suite_name="integration-valkey"
fi

# The benchmark's smoke run (no thresholds), so tests/bench/run cannot rot.
if [[ -x build-test-plain/proxy/idempotency-proxy ]]; then
  echo "=== benchmark smoke run"
  start=$(date +%s)
  if PROXY_BIN="$root/build-test-plain/proxy/idempotency-proxy" tests/bench/run --smoke \
      >"$results/bench.log" 2>&1; then bench_ok=1; else bench_ok=0; tail -30 "$results/bench.log"; fi
  /usr/bin/python3 - "$results/bench-smoke.xml" "$bench_ok" "$(( $(date +%s) - start ))" <<'PY'
import sys
path, ok, secs = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
case = '<testcase classname="bench" name="smoke" time="%s">%s</testcase>' % (
    secs, "" if ok else '<failure message="tests/bench/run --smoke failed"/>')
open(path, "w").write('<testsuite name="bench">%s</testsuite>\n' % case)
PY
fi

/usr/bin/python3 - "$results" "$build_failures" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for path in glob.glob(sys.argv[1] + "/*.xml"):
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
failed += int(sys.argv[2])
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed or passed == 0 else 0)
PY
