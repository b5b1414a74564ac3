-- Every request is a new webhook delivery to a queued route (README "Webhook inbox"): a fresh
-- event id in the JSON body each time (claim, append to the route's stream, record 202, answer).
-- Ids: evt-<BENCH_TAG>-<thread>-<counter>, so separate runs never collide.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local counter = 0
local tag = os.getenv("BENCH_TAG") or tostring(os.time())
local headers = { ["Content-Type"] = "application/json" }
function request()
  counter = counter + 1
  local body = '{"id":"evt-' .. tag .. '-' .. tostring(tid) .. '-' .. counter ..
               '","type":"payment_intent.succeeded","data":{"object":{"amount":1000}}}'
  return wrk.format("POST", "/webhooks/queued", headers, body)
end
