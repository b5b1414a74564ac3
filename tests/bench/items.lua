-- A new payment per request (a fresh Idempotency-Key, as unique.lua), its body BENCH_BODY bytes
-- of JSON shaped like an order: a few members and an array of small item objects, so that a
-- `fingerprint: json` route has members to parse and sort, not one long string. The same bytes
-- go to every route. BENCH_PATH: the route (default /v1/payments).
dofile((os.getenv("BENCH_DIR") or ".") .. "/common.lua")
local path = os.getenv("BENCH_PATH") or "/v1/payments"
local size = tonumber(os.getenv("BENCH_BODY") or "0") or 0
local body
local headers = { ["Content-Type"] = "application/json" }

local function items_body()
  local head = '{"amount":1000,"currency":"eur","customer":"cus_1","description":"order 1","items":['
  local items, len, i = {}, #head + 2, 0
  repeat
    i = i + 1
    local item = string.format('{"sku":"sku-%06d","qty":%d,"price":%d.5,"gift":false}', i, i % 7 + 1, i % 100)
    items[i] = item
    len = len + #item + 1
  until len >= size
  return head .. table.concat(items, ",") .. "]}"
end

function init(args)
  body = items_body()
end
function request()
  headers["Idempotency-Key"] = bench_fresh_id("bench")
  return wrk.format("POST", path, headers, body)
end
