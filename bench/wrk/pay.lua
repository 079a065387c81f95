-- pay.lua - wrk script: the payment provider's notifications for a list
-- of orders, all at once (bench/paystorm.sh).
--
--   PAY_ORDERS=orders.txt PAY_SECRET=<64 hex> PAY_THREADS=2 \
--     wrk -t2 -c256 -d60s -s bench/wrk/pay.lua http://127.0.0.1:8080
--
-- orders.txt holds one order id a line. Thread k of PAY_THREADS sends
-- POST /api/payments/notify for orders k+1, k+1+T, k+1+2T, ... of the
-- list, as {"orderId":"<id>","amount":PAY_AMOUNT,"txnId":"storm-<id>"}
-- signed with PAY_SECRET (X-Signature: the lower-case hex HMAC-SHA256 of
-- the body, libsodium through LuaJIT's FFI), until each is answered 200
-- "paid" (see request() for the rare one sent twice). Meanwhile a thread with nothing to send sends
-- GET /healthz (not counted). Once all its orders are paid it touches
-- PAY_DONE_FILE.<k> and stops. PAY_HOSTS=h:p,h:p: thread k sends to the
-- (k mod n)-th address. PAY_REPORT names the JSON report: the orders paid,
-- the other answers (refused: 4xx, unavailable: 503, other), how many
-- were sent again, first_s and last_s (wall-clock seconds of the first
-- payment sent and the last order answered paid, over all threads) and
-- the rate between them; latencies are wrk's, over every request.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } pay_timespec;
int clock_gettime(int clk, pay_timespec *ts);
int sodium_init(void);
int crypto_auth_hmacsha256(unsigned char *out, const unsigned char *in,
                           unsigned long long inlen, const unsigned char *k);
]]
local ts = ffi.new("pay_timespec")
local function now()
  ffi.C.clock_gettime(0, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

local sodium = ffi.load("sodium")
sodium.sodium_init()
local key = ffi.new("unsigned char[32]")
local hex = os.getenv("PAY_SECRET") or ""
for k = 0, 31 do
  key[k] = tonumber(hex:sub(2 * k + 1, 2 * k + 2), 16)
end
local mac = ffi.new("unsigned char[32]")
local function sign(body)
  sodium.crypto_auth_hmacsha256(mac, body, #body, key)
  local out = {}
  for k = 0, 31 do out[#out + 1] = string.format("%02x", mac[k]) end
  return table.concat(out)
end

local counter = 0
local threads = {}

function setup(thread)
  thread:set("index", counter)
  local hosts = os.getenv("PAY_HOSTS")
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

function init(args)
  local stride = tonumber(os.getenv("PAY_THREADS") or "1")
  local amount = os.getenv("PAY_AMOUNT") or "100"
  local n = 0
  ids, reqs, answered, sent_at = {}, {}, {}, {}
  for line in io.lines(os.getenv("PAY_ORDERS")) do
    local id = line:match("^(%d+)")
    if id then
      if n % stride == index then
        local body = string.format(
          '{"orderId":"%s","amount":%s,"txnId":"storm-%s"}', id, amount, id)
        ids[#ids + 1] = id
        reqs[#reqs + 1] = wrk.format("POST", "/api/payments/notify",
          { ["X-Signature"] = sign(body),
            ["Content-Type"] = "application/json" }, body)
      end
      n = n + 1
    end
  end
  share, next_req, pass = #ids, 1, 1
  probe = index == 0
  filler = wrk.format("GET", "/healthz")
  done_file = (os.getenv("PAY_DONE_FILE") or "") .. "." .. index
  t_first, t_last = -1, -1
  n_paid, n_refused, n_unavailable, n_other, n_resent = 0, 0, 0, 0, 0
  if share == 0 then io.open(done_file, "w"):close() end
end

-- wrk 4.1 calls thread 0's request() once before the run, to see whether
-- it pipelines, and drops what it returns: that call gets the filler.
-- Should some other request be lost all the same, an order not answered
-- "paid" 5 s after it was sent is sent again (the same notification
-- twice is one payment: the service says so); resent counts them.
request = function()
  local t = now()
  if probe then
    probe = false
    return filler
  end
  for _ = 1, share do
    if next_req > share then
      next_req, pass = 1, pass + 1
    end
    local k = next_req
    next_req = next_req + 1
    if not answered[ids[k]] and (pass == 1 or t - sent_at[k] > 5) then
      if t_first < 0 then t_first = t end
      if pass > 1 then n_resent = n_resent + 1 end
      sent_at[k] = t
      return reqs[k]
    end
    if pass == 1 and next_req > share then break end
  end
  return filler
end

response = function(status, headers, body)
  if status == 200 then
    local id = body:match('"id":"(%d+)"')
    if not id then return end -- a filler's answer ({"status":"ok"})
    if body:find('"paid"', 1, true) and not answered[id] then
      answered[id] = true
      n_paid = n_paid + 1
      if n_paid == share then
        t_last = now()
        io.open(done_file, "w"):close()
        wrk.thread:stop()
      end
    elseif not body:find('"paid"', 1, true) then
      n_other = n_other + 1
    end
  elseif status == 503 then
    n_unavailable = n_unavailable + 1
  elseif status >= 400 and status < 500 then
    n_refused = n_refused + 1
  else
    n_other = n_other + 1
  end
end

function done(summary, latency, requests)
  local c = { paid = 0, refused = 0, unavailable = 0, other = 0, resent = 0 }
  local first, last = -1, -1
  for _, t in ipairs(threads) do
    c.resent = c.resent + (t:get("n_resent") or 0)
    c.paid = c.paid + (t:get("n_paid") or 0)
    c.refused = c.refused + (t:get("n_refused") or 0)
    c.unavailable = c.unavailable + (t:get("n_unavailable") or 0)
    c.other = c.other + (t:get("n_other") or 0)
    local f, l = t:get("t_first") or -1, t:get("t_last") or -1
    if f >= 0 and (first < 0 or f < first) then first = f end
    if l > last then last = l end
  end
  local span = (first >= 0 and last >= first) and last - first or -1
  local e = summary.errors
  local out = string.format(
    '{"paid":%d,"refused":%d,"unavailable":%d,"other":%d,"resent":%d,' ..
    '"first_s":%.3f,"last_s":%.3f,"span_s":%.3f,"rate":%.1f,' ..
    '"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},' ..
    '"p50_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f}',
    c.paid, c.refused, c.unavailable, c.other, c.resent, first, last, span,
    span > 0 and c.paid / span or 0,
    e.connect, e.read, e.write, e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000)
  local file = os.getenv("PAY_REPORT")
  if file and file ~= "" then
    local f = io.open(file, "w")
    f:write(out, "\n")
    f:close()
  else
    io.write(out, "\n")
  end
end
