#!/usr/bin/env sysbench
-- purchase.lua - sysbench script: the service's purchase transaction, and
-- nothing else, on one hot voucher row. The raw per-request limit of the
-- naive design that make bench compares the selling phase against.
--
--   sysbench bench/sysbench/purchase.lua --db-driver=mysql \
--     --mysql-host=127.0.0.1 --mysql-port=13306 --mysql-user=seckill \
--     --mysql-password=seckill --mysql-db=seckill \
--     --voucher=<seckill voucher id> --id-base=1000000000000000 \
--     --threads=256 --time=8 --percentile=99 run
--
-- Each event is what store/orders.c sends for one purchase, with the same
-- statements as store/conn.c (prepared, binary protocol) and the same
-- session settings as store_mysql_ensure():
--
--   START TRANSACTION
--   SELECT 1 FROM voucher_orders WHERE user_id = ? AND voucher_id = ?
--     AND status IN (1, 2) LIMIT 1
--   INSERT INTO voucher_orders (id, user_id, voucher_id, status, pay_deadline)
--     VALUES (?, ?, ?, 1, NOW(3) + INTERVAL ? SECOND)
--   UPDATE seckill_vouchers SET stock = stock - 1 WHERE voucher_id = ? AND stock > 0
--   COMMIT
--
-- on the same server, so with the same isolation (the server's default,
-- REPEATABLE READ) and durability (innodb_flush_log_at_trx_commit) as the
-- service. Order id and user id of an event are id-base + thread * 1e7 +
-- n: fresh users, so the SELECT finds nothing, as for a real buyer, and
-- ids below 2^53 that never meet the service's (which are above 2^59).
-- sysbench's Lua API gives no affected-row count for a prepared UPDATE, so
-- the script cannot branch on the CAS as the service does (ROLLBACK when
-- it changed no row): the voucher gets stock for far more than the run,
-- and make bench checks afterwards that the orders equal the stock taken
-- (every CAS matched). make bench deletes the orders afterwards. Not done here: the voucher read before the
-- transaction, the Redis lock and the order id (see make bench's
-- redis-benchmark figures).

sysbench.cmdline.options = {
  voucher = { "seckill voucher id (the hot row)", 0 },
  ["id-base"] = { "first order and user id (below 2^53)", 1000000000000000 },
}

function thread_init()
  voucher = sysbench.opt.voucher
  if voucher == 0 then
    error("--voucher is required")
  end
  next_id = sysbench.opt.id_base + sysbench.tid * 10000000
  drv = sysbench.sql.driver()
  con = drv:connect()
  con:query("SET time_zone = '+00:00'")
  con:query("SET SESSION idle_write_transaction_timeout = 3, " ..
            "innodb_lock_wait_timeout = 3")

  local T = sysbench.sql.type
  exists = con:prepare("SELECT 1 FROM voucher_orders WHERE user_id = ? " ..
                       "AND voucher_id = ? AND status IN (1, 2) LIMIT 1")
  ex_user = exists:bind_create(T.BIGINT)
  ex_voucher = exists:bind_create(T.BIGINT)
  exists:bind_param(ex_user, ex_voucher)

  insert = con:prepare("INSERT INTO voucher_orders (id, user_id, " ..
                       "voucher_id, status, pay_deadline) VALUES " ..
                       "(?, ?, ?, 1, NOW(3) + INTERVAL ? SECOND)")
  in_id = insert:bind_create(T.BIGINT)
  in_user = insert:bind_create(T.BIGINT)
  in_voucher = insert:bind_create(T.BIGINT)
  in_timeout = insert:bind_create(T.BIGINT)
  insert:bind_param(in_id, in_user, in_voucher, in_timeout)

  decr = con:prepare("UPDATE seckill_vouchers SET stock = stock - 1 " ..
                     "WHERE voucher_id = ? AND stock > 0")
  de_voucher = decr:bind_create(T.BIGINT)
  decr:bind_param(de_voucher)

  ex_voucher:set(voucher)
  in_voucher:set(voucher)
  in_timeout:set(900) -- the service's default pay timeout
  de_voucher:set(voucher)
end

function event()
  next_id = next_id + 1
  con:query("START TRANSACTION")
  ex_user:set(next_id)
  local rs = exists:execute()
  if rs ~= nil and rs.nrows > 0 then
    con:query("ROLLBACK")
    return
  end
  in_id:set(next_id)
  in_user:set(next_id)
  insert:execute()
  decr:execute()
  con:query("COMMIT")
end

-- A lock wait timeout (1205) rolls back only the statement: end the whole
-- transaction before the event starts again (--mysql-ignore-errors).
sysbench.hooks.before_restart_event = function(err)
  con:query("ROLLBACK")
end

function thread_done()
  exists:close()
  insert:close()
  decr:close()
  con:disconnect()
end
