-- Retries of known payments: keys replay-<BENCH_TAG>-0 .. N-1 (N = BENCH_KEYS, default 1000) were
-- sent once by warm.py with the same bodies, so every request here is answered from Redis.
dofile((os.getenv("BENCH_DIR") or ".") .. "/common.lua")
local nkeys = tonumber(os.getenv("BENCH_KEYS") or "1000") or 1000
local tag = os.getenv("BENCH_TAG") or "0"
local reqs = {}
local i = 0
function init(args)
  -- prebuilt, and each thread starts at its own offset: no wrk-side cost per request
  for n = 0, nkeys - 1 do
    reqs[n] = wrk.format("POST", "/v1/payments", {
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = "replay-" .. tag .. "-" .. n,
    }, bench_body(n))
  end
  i = ((tid or 1) - 1) * 499 % nkeys
end
function request()
  i = (i + 1) % nkeys
  return reqs[i]
end
