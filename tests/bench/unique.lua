-- Every request is a new payment: a fresh Idempotency-Key each time (claim, forward, record).
-- Keys: bench-<BENCH_TAG>-<thread>-<counter>, so separate runs never collide.
dofile((os.getenv("BENCH_DIR") or ".") .. "/common.lua")
local body
local headers = { ["Content-Type"] = "application/json" }
function init(args)
  body = bench_body(1)
end
function request()
  headers["Idempotency-Key"] = bench_fresh_id("bench")
  return wrk.format("POST", "/v1/payments", headers, body)
end
