-- buy.lua - wrk script: each request buys as the next user of users.csv.
--
--   build/seckilld tokens --first 1000000 --count 20000 > users.csv
--   BUY_PATH=/api/vouchers/<id>/seckill USER_BASE=0 \
--     wrk -t1 -c32 -d8s -s bench/wrk/buy.lua --latency http://127.0.0.1:8080
--
-- users.csv is read from the current folder (USERS_CSV names another
-- file). Each wrk thread starts 5000 users further on, plus USER_BASE, so
-- two wrk runs against two instances can use disjoint users (USER_BASE=0
-- and USER_BASE=10000). bench/run.sh (make bench) also sets:
--
--   BUY_THREADS=T   wrk's -t: thread k then takes users k, k+T, k+2T, ...
--                   after USER_BASE, so no two threads share a user
--   BUY_HOSTS=h:p,h:p,...  thread k sends to the (k mod n)-th address,
--                   so one wrk spreads its threads over several instances
--                   (the URL still gives the Host header)
--   BUY_STOP_SOLD_OUT=1  the first 409 SOLD_OUT sends wrk a SIGINT, which
--                   stops the threads; wrk's main thread wakes only if the
--                   signal lands on it, so it may still wait out -d
--                   (make bench also signals it from outside)
--   BUY_SOLD_OUT_FILE=F  the first 409 SOLD_OUT creates the file F
--   BUY_METHOD=GET  another method (default POST)
--   BUY_PATHS=p1,p2,...  several vouchers on sale at once: each thread
--                   sends its successive users to p1, p2, ... in turn
--                   (BUY_PATH is then not needed)
--   BUY_START_DIR=D  a fresh, empty directory: all threads start together.
--                   wrk builds its threads one after the other, each
--                   reading users.csv (seconds for a few hundred thousand
--                   users), and starts each one as soon as it is built, so
--                   its first thread would buy alone until the last one is
--                   built. With D (and BUY_THREADS), each thread's first
--                   request marks D/<thread> and waits until every thread's
--                   mark is there (at most a minute); the request wrk asks
--                   for in its main thread to check the script is not held
--   BUY_PAY_PERCENT=P  after a 201, pay the order with probability P%:
--                   the thread's next request is the payment provider's
--                   POST /api/payments/notify for it, signed with
--                   BUY_PAY_SECRET (64 hex characters, the service's
--                   SECKILL_PAY_SECRET; HMAC-SHA256 by libsodium through
--                   LuaJIT's FFI) for BUY_PAY_AMOUNT cents; its answers
--                   are counted as paid (200) and pay_late (409
--                   ORDER_CLOSED: the order had expired)
--   BUY_REPORT=FILE write one JSON object at the end: requests, duration_s,
--                   replies by kind (ok = 201 or 202, sold_out, duplicate, busy =
--                   429 BUSY, limited = 429 RATE_LIMITED, unavailable =
--                   503, other), wrk's socket errors, p50/p90/p99/max
--                   latency in ms, and sold_out_after_s: from the first
--                   request sent to the first SOLD_OUT received (wall
--                   clock, any thread, after the start line when there is
--                   one; -1 if none)
--
-- A purchase request is the two fixed parts made in init() around the next
-- token, not wrk.format(): wrk.format builds a table of headers and
-- several strings per call, and the garbage collector then walks the whole
-- token table (hundreds of thousands of strings) again and again; with it,
-- wrk took about 41 µs of the machine's CPU per accepted purchase in the
-- async accept phase, with the concatenation 20-28 µs (the two cores the
-- service competes for). A payment still uses wrk.format.
--
-- Counting replies needs their bodies (409 SOLD_OUT or ALREADY_PURCHASED),
-- so wrk runs this script's response() on every reply; the nginx raw limit
-- in make bench is measured with this same script, so both pay it.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } buy_timespec;
int clock_gettime(int clk, buy_timespec *ts);
unsigned long pthread_self(void);
int poll(void *fds, unsigned long nfds, int timeout);
]]
local ts = ffi.new("buy_timespec")
-- Wall-clock seconds (CLOCK_REALTIME), comparable across threads.
local function now()
  ffi.C.clock_gettime(0, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

local tokens = {}
for line in io.lines(os.getenv("USERS_CSV") or "users.csv") do
  local id, tok = line:match("^(%d+),(.+)$")
  if id then tokens[#tokens + 1] = tok end
end
local counter = 0
local threads = {}
local path = os.getenv("BUY_PATH")
local method = os.getenv("BUY_METHOD") or "POST"

function setup(thread)
  thread:set("offset", counter)
  local hosts = os.getenv("BUY_HOSTS")
  if hosts and hosts ~= "" then
    local list = {}
    for h, p in hosts:gmatch("([^,:]+):(%d+)") do
      list[#list + 1] = { h, p }
    end
    local pick = list[(counter % #list) + 1]
    thread.addr = wrk.lookup(pick[1], pick[2])[1]
  end
  counter = counter + 1
  threads[#threads + 1] = thread
end

-- Paying: libsodium's HMAC-SHA256, and the orders waiting to be paid.
local pay_percent = tonumber(os.getenv("BUY_PAY_PERCENT") or "0")
local pay_key, sodium
if pay_percent > 0 then
  ffi.cdef [[
  int sodium_init(void);
  int crypto_auth_hmacsha256(unsigned char *out, const unsigned char *in,
                             unsigned long long inlen, const unsigned char *k);
  ]]
  sodium = ffi.load("sodium")
  sodium.sodium_init()
  local hex = os.getenv("BUY_PAY_SECRET") or ""
  pay_key = ffi.new("unsigned char[32]")
  for k = 0, 31 do
    pay_key[k] = tonumber(hex:sub(2 * k + 1, 2 * k + 2), 16)
  end
end
local pay_amount = os.getenv("BUY_PAY_AMOUNT") or "100"
local mac = ffi.new("unsigned char[32]")

local function sign(body)
  sodium.crypto_auth_hmacsha256(mac, body, #body, pay_key)
  local out = {}
  for k = 0, 31 do out[#out + 1] = string.format("%02x", mac[k]) end
  return table.concat(out)
end

function init(args)
  local base = tonumber(os.getenv("USER_BASE") or "0")
  stride = tonumber(os.getenv("BUY_THREADS") or "0")
  if stride > 0 then
    i = base + offset - stride
  else
    stride = 1
    i = offset * 5000 + base
  end
  stop_sold_out = os.getenv("BUY_STOP_SOLD_OUT") == "1"
  sold_out_file = os.getenv("BUY_SOLD_OUT_FILE")
  t_first, t_sold = -1, -1
  n_ok, n_sold_out, n_duplicate, n_busy, n_limited = 0, 0, 0, 0, 0
  n_unavailable, n_other = 0, 0
  n_paid, n_pay_late = 0, 0
  to_pay = {}
  math.randomseed(offset + 1)
  -- init() runs in wrk's main thread; so does its check of request().
  main_thread = ffi.C.pthread_self()
  start_dir = os.getenv("BUY_START_DIR")
  req_heads = {}
  for p in (os.getenv("BUY_PATHS") or path or ""):gmatch("[^,]+") do
    req_heads[#req_heads + 1] = method .. " " .. p .. " HTTP/1.1\r\nHost: " ..
      wrk.headers["Host"] .. "\r\nAuthorization: Bearer "
  end
  req_tail = "\r\nContent-Length: 0\r\n\r\n"
end

local function exists(name)
  local f = io.open(name, "r")
  if f then f:close() end
  return f ~= nil
end

-- The start line: mark this thread, then wait for every thread's mark.
local function start_line()
  local n = stride > 1 and stride or 1
  io.open(start_dir .. "/" .. offset, "w"):close()
  local give_up = now() + 60
  for k = 0, n - 1 do
    while not exists(start_dir .. "/" .. k) do
      if now() > give_up then
        io.stderr:write("buy.lua: not every thread reached the start line\n")
        return
      end
      ffi.C.poll(nil, 0, 5)
    end
  end
end

request = function()
  if t_first < 0 and ffi.C.pthread_self() ~= main_thread then
    if start_dir and start_dir ~= "" then start_line() end
    t_first = now()
  end
  if #to_pay > 0 then
    local id = table.remove(to_pay)
    local body = string.format(
      '{"orderId":"%s","amount":%s,"txnId":"bench-%s"}', id, pay_amount, id)
    return wrk.format("POST", "/api/payments/notify",
      { ["X-Signature"] = sign(body),
        ["Content-Type"] = "application/json" }, body)
  end
  i = i + stride
  return req_heads[math.floor(i / stride) % #req_heads + 1] ..
    tokens[(i % #tokens) + 1] .. req_tail
end

-- wrk's own pid, from /proc/self/stat (LuaJIT has no getpid).
local function wrk_pid()
  local f = io.open("/proc/self/stat")
  local pid = f:read("*n")
  f:close()
  return pid
end

response = function(status, headers, body)
  if status == 201 or status == 202 then
    n_ok = n_ok + 1
    if pay_percent > 0 and math.random(100) <= pay_percent then
      local id = body:match('"orderId":"(%d+)"')
      if id then to_pay[#to_pay + 1] = id end
    end
  elseif status == 200 then
    n_paid = n_paid + 1
  elseif status == 409 and body:find("ORDER_CLOSED", 1, true) then
    n_pay_late = n_pay_late + 1
  elseif status == 409 then
    if body:find("SOLD_OUT", 1, true) then
      n_sold_out = n_sold_out + 1
      if t_sold < 0 then
        t_sold = now()
        if sold_out_file and sold_out_file ~= "" then
          io.open(sold_out_file, "w"):close()
        end
        if stop_sold_out then
          -- Not os.execute: system() ignores SIGINT while the child runs.
          io.popen("kill -INT " .. wrk_pid()):close()
        end
      end
    elseif body:find("ALREADY_PURCHASED", 1, true) then
      n_duplicate = n_duplicate + 1
    else
      n_other = n_other + 1
    end
  elseif status == 429 then
    if body:find("BUSY", 1, true) then
      n_busy = n_busy + 1
    else
      n_limited = n_limited + 1
    end
  elseif status == 503 then
    n_unavailable = n_unavailable + 1
  else
    n_other = n_other + 1
  end
end

function done(summary, latency, requests)
  local c = { ok = 0, sold_out = 0, duplicate = 0, busy = 0, limited = 0,
              unavailable = 0, other = 0, paid = 0, pay_late = 0 }
  for _, t in ipairs(threads) do
    c.ok = c.ok + (t:get("n_ok") or 0)
    c.sold_out = c.sold_out + (t:get("n_sold_out") or 0)
    c.duplicate = c.duplicate + (t:get("n_duplicate") or 0)
    c.busy = c.busy + (t:get("n_busy") or 0)
    c.limited = c.limited + (t:get("n_limited") or 0)
    c.unavailable = c.unavailable + (t:get("n_unavailable") or 0)
    c.other = c.other + (t:get("n_other") or 0)
    c.paid = c.paid + (t:get("n_paid") or 0)
    c.pay_late = c.pay_late + (t:get("n_pay_late") or 0)
  end
  local first, sold = -1, -1
  for _, t in ipairs(threads) do
    local f, so = t:get("t_first") or -1, t:get("t_sold") or -1
    if f >= 0 and (first < 0 or f < first) then first = f end
    if so >= 0 and (sold < 0 or so < sold) then sold = so end
  end
  local sold_after = (first >= 0 and sold >= 0) and sold - first or -1
  local e = summary.errors
  local out = string.format(
    '{"requests":%d,"duration_s":%.3f,"ok":%d,"sold_out":%d,' ..
    '"duplicate":%d,"busy":%d,"limited":%d,"unavailable":%d,"other":%d,' ..
    '"paid":%d,"pay_late":%d,' ..
    '"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},' ..
    '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,' ..
    '"sold_out_after_s":%.3f}',
    summary.requests, summary.duration / 1e6, c.ok, c.sold_out,
    c.duplicate, c.busy, c.limited, c.unavailable, c.other, c.paid,
    c.pay_late,
    e.connect, e.read, e.write, e.timeout,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, sold_after)
  local file = os.getenv("BUY_REPORT")
  if file and file ~= "" then
    local f = io.open(file, "w")
    f:write(out, "\n")
    f:close()
  else
    io.write(out, "\n")
  end
end
