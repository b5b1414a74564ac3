-- Shared by the wrk scripts of tests/bench/run (loaded with dofile).
-- BENCH_BODY: request body size in bytes (0 or unset: a ~75-byte JSON).
-- The same formula is in warm.py, so a replay matches the request that was stored.
local size = tonumber(os.getenv("BENCH_BODY") or "0") or 0

function bench_body(n)
  local head = '{"amount":1000,"currency":"eur","customer":"cus_' .. n .. '","description":"order ' .. n .. '"'
  if size <= 0 then return head .. '}' end
  local fill = size - #head - #',"pad":""}'
  if fill < 0 then fill = 0 end
  return head .. ',"pad":"' .. string.rep("x", fill) .. '"}'
end
