-- buy.lua - wrk script: each request buys as the next user of users.csv.
--
--   build/seckilld tokens --first 1000000 --count 20000 > users.csv
--   BUY_PATH=/api/vouchers/<id>/seckill USER_BASE=0 \
--     wrk -t1 -c32 -d8s -s bench/wrk/buy.lua --latency http://127.0.0.1:8080
--
-- users.csv is read from the current folder. Each wrk thread starts 5000
-- users further on, plus USER_BASE, so two wrk runs against two instances
-- can use disjoint users (USER_BASE=0 and USER_BASE=10000).
local tokens = {}
for line in io.lines("users.csv") do
  local id, tok = line:match("^(%d+),(.+)$")
  if id then tokens[#tokens + 1] = tok end
end
local counter = 0
local path = os.getenv("BUY_PATH")

function setup(thread)
  thread:set("offset", counter)
  counter = counter + 1
end

function init(args)
  i = offset * 5000 + tonumber(os.getenv("USER_BASE") or "0")
end

request = function()
  i = i + 1
  return wrk.format("POST", path,
    {["Authorization"] = "Bearer " .. tokens[(i % #tokens) + 1]}, "")
end
