-- Shared by the wrk scripts of tests/bench/run (loaded with dofile).
-- BENCH_BODY: request body size in bytes (0 or unset: a ~75-byte JSON).
-- The same formula is in warm.py, so a replay matches the request that was stored.
-- Each thread gets its number as `tid` (wrk's setup), so keys and ids never collide.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

-- A new id per call: PREFIX-<BENCH_TAG>-<thread>-<counter>, so separate runs never collide.
local counter = 0
local tag = os.getenv("BENCH_TAG") or tostring(os.time())
function bench_fresh_id(prefix)
  counter = counter + 1
  return prefix .. "-" .. tag .. "-" .. tostring(tid) .. "-" .. counter
end

local size = tonumber(os.getenv("BENCH_BODY") or "0") or 0

function bench_body(n)
  local head = '{"amount":1000,"currency":"eur","customer":"cus_' .. n .. '","description":"order ' .. n .. '"'
  if size <= 0 then return head .. '}' end
  local fill = size - #head - #',"pad":""}'
  if fill < 0 then fill = 0 end
  return head .. ',"pad":"' .. string.rep("x", fill) .. '"}'
end
