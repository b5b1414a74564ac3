-- Every request is a new webhook delivery to a queued route (README "Webhook inbox"): a fresh
-- event id in the JSON body each time (claim, append to the route's stream, record 202, answer).
-- Ids: evt-<BENCH_TAG>-<thread>-<counter>, so separate runs never collide.
dofile((os.getenv("BENCH_DIR") or ".") .. "/common.lua")
local headers = { ["Content-Type"] = "application/json" }
function request()
  local body = '{"id":"' .. bench_fresh_id("evt") .. '","type":"payment_intent.succeeded","data":{"object":{"amount":1000}}}'
  return wrk.format("POST", "/webhooks/queued", headers, body)
end
