#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, builds three times (plain with
# -Werror; AddressSanitizer + UndefinedBehaviorSanitizer; ThreadSanitizer) and runs, against
# the real binary, a real redis-server and the demo upstream:
#
#   plain  unit tests; every integration test: those without a topology first (pytest-xdist,
#          IDEM_TEST_JOBS processes), then the topology scenarios (Sentinel, Cluster, failover,
#          slow receivers: marker `topology`), fewer at a time (IDEM_TEST_TOPOLOGY_JOBS);
#   asan   unit tests; every integration test but the topology scenarios (those marked
#          `sanitize` too): ASan/UBSan sees every test of bodies, records, the store, the
#          inbox and the admin API;
#   tsan   unit tests; the integration tests that run more than one worker thread (marker
#          `threads`: tests/unit/check_test_markers.py fails a test that sets `workers: 2`
#          without it), but the topology scenarios.
#
# Then, with the plain binary: the store's tests again against valkey-server, the inbox's tests
# again as the documented ACL user, the benchmark's smoke run, and the container image built
# with podman and run (docker/test-image.sh; IDEM_SKIP_IMAGE_TEST=1 skips it). docs/internals.md
# "The test suite" says how it is split and how to run one test under each build.
# Ends with one line "N passed, N failed".
#
#   tests/run.sh              everything above (the README's test command, and CI's)
#   tests/run.sh quick        unit tests and the plain integration tests without a topology
#   tests/run.sh plain        one variant (plain | asan | tsan), as above
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
"$root/tests/install-deps.sh" --tests || { echo "0 passed, 1 failed"; exit 1; }

quick=0
variants=("$@")
if [[ ${1:-} == quick ]]; then
  quick=1
  variants=(plain)
fi
((${#variants[@]})) || variants=(plain asan tsan)
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
build_failures=0
jobs=${IDEM_TEST_JOBS:-6}                   # the suite mostly waits: 6 at a time on 2 cores
topology_jobs=${IDEM_TEST_TOPOLOGY_JOBS:-2} # each runs its own Redis group and client load

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=0}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:report_signal_unsafe=0:suppressions=$root/tests/tsan.supp}

# pytest with the binary of build $1, junit as $2; the rest are pytest's (the tests to run first).
integration() {
  local dir=$1 name=$2
  shift 2
  IDEM_PROXY_BIN="$root/$dir/proxy/idempotency-proxy" \
    /usr/bin/python3 -m pytest -q "$@" --durations=15 \
    --junitxml="$results/integration-$name.xml" -o junit_suite_name="integration-$name"
}

for v in "${variants[@]}"; do
  dir="build-test-$v"
  opts=(-Dwerror=true -Dbuildtype=debugoptimized)
  # shellcheck disable=SC2054  # one meson option with a comma-separated value
  [[ $v == asan ]] && opts+=(-Db_sanitize=address,undefined -Db_lundef=false)
  [[ $v == tsan ]] && opts+=(-Db_sanitize=thread -Db_lundef=false)
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
  case $v in
    plain)
      integration "$dir" plain tests/integration -n "$jobs" -m "not topology"
      if ((!quick)); then
        echo "=== plain: the topology scenarios"
        integration "$dir" plain-topology tests/integration -n "$topology_jobs" -m topology
      fi
      ;;
    asan) integration "$dir" asan tests/integration -n "$jobs" -m "not topology or sanitize" ;;
    tsan) IDEM_TEST_WORKERS=2 integration "$dir" tsan tests/integration -n "$jobs" \
            -m "threads and not topology" ;;
  esac
done

if ((!quick)) && [[ " ${variants[*]} " == *" plain "* && -x build-test-plain/proxy/idempotency-proxy ]]; then
  # The store's tests once more against valkey-server 8 (bookworm-backports), the server several
  # managed offerings now run: the production-Redis and store-fault files, and the Redis tests
  # of the feature files (the store, readiness, purging and listing records, a Redis URL at
  # startup).
  echo "=== valkey: the store's tests against valkey-server"
  IDEM_REDIS_SERVER=valkey-server integration build-test-plain valkey -n "$jobs" \
    tests/integration/test_redis_connection.py \
    tests/integration/test_store_faults.py tests/integration/test_store.py \
    tests/integration/test_operations.py tests/integration/test_fingerprint_mismatch.py \
    tests/integration/test_cli.py \
    -k "test_redis_connection or test_store_faults or redis or readyz or purge or records or claim_that_lands or sigterm_waits_to_release"
  # Every inbox test case once more with the proxy connecting as docs/redis.md's "Webhook inbox
  # user" (the ACL line as written), so that line cannot miss a command the inbox runs.
  echo "=== acl: the inbox's tests as the documented inbox user"
  IDEM_TEST_ACL_USER="Webhook inbox user" integration build-test-plain acl-inbox -n "$jobs" \
    tests/integration/test_inbox.py tests/integration/test_inbox_controls.py -m "not topology"
fi

# Runs a command once as one junit testcase CLASS.NAME (the output in
# $results/CLASS.log; on a failure its end on the console and in the testcase).
testcase() {
  local class=$1 name=$2 start ok=1
  shift 2
  start=$(date +%s)
  "$@" >"$results/$class.log" 2>&1 || { ok=0; tail -40 "$results/$class.log"; }
  /usr/bin/python3 - "$results/$class-$name.xml" "$class" "$name" "$ok" "$(($(date +%s) - start))" \
    "$results/$class.log" "$*" <<'PY'
import sys, xml.etree.ElementTree as ET
path, cls, name, ok, secs, log, cmd = sys.argv[1:]
suite = ET.Element("testsuite", name=cls)
case = ET.SubElement(suite, "testcase", classname=cls, name=name, time=secs)
if ok != "1":
    with open(log, errors="replace") as f:
        ET.SubElement(case, "failure", message=cmd + " failed").text = "".join(f.readlines()[-40:])
ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
PY
}

# The benchmark's smoke run (no thresholds), so tests/bench/run cannot rot.
if ((!quick)) && [[ " ${variants[*]} " == *" plain "* && -x build-test-plain/proxy/idempotency-proxy ]]; then
  echo "=== benchmark smoke run"
  testcase bench smoke env PROXY_BIN="$root/build-test-plain/proxy/idempotency-proxy" tests/bench/run --smoke
fi

# The container image: docker/Dockerfile built with podman on base images made
# by mmdebstrap, and the demo run through the container. Once, not per variant:
# it builds its own binary inside the image.
if ((!quick)) && [[ " ${variants[*]} " == *" plain "* && ${IDEM_SKIP_IMAGE_TEST:-} != 1 ]]; then
  echo "=== image: docker/test-image.sh"
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  testcase image podman "${sudo[@]}" docker/test-image.sh
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
if skipped:
    print(f"({skipped} skipped, counted in neither)")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed or passed == 0 else 0)
PY
