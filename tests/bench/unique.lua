-- Every request is a new payment: a fresh Idempotency-Key each time (claim, forward, record).
-- Keys: bench-<BENCH_TAG>-<thread>-<counter>, so separate runs never collide.
dofile((os.getenv("BENCH_DIR") or ".") .. "/common.lua")
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local counter = 0
local tag = os.getenv("BENCH_TAG") or tostring(os.time())
local body
local headers = { ["Content-Type"] = "application/json" }
function init(args)
  body = bench_body(1)
end
function request()
  counter = counter + 1
  headers["Idempotency-Key"] = "bench-" .. tag .. "-" .. tostring(tid) .. "-" .. counter
  return wrk.format("POST", "/v1/payments", headers, body)
end
