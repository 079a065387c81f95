-- 0002: the order lifecycle (pay, cancel, expiry). Orders gain a pay
-- deadline (NULL: never expires; orders from before have none), pay and
-- close times and the payment provider's transaction (unique: one payment
-- pays one order). One order per user and voucher becomes one ACTIVE
-- (unpaid or paid) order: a unique key over a generated column that is the
-- user while the order is active and NULL once it is closed, so a buyer
-- may buy again after a cancel. Status 4 cancelled, 7 expired.
ALTER TABLE voucher_orders
    ADD COLUMN IF NOT EXISTS pay_deadline DATETIME(3) NULL AFTER status,
    ADD COLUMN IF NOT EXISTS pay_time DATETIME(3) NULL AFTER pay_deadline,
    ADD COLUMN IF NOT EXISTS close_time DATETIME(3) NULL AFTER pay_time,
    ADD COLUMN IF NOT EXISTS txn_id VARCHAR(64) NULL AFTER close_time,
    ADD COLUMN IF NOT EXISTS active_user BIGINT UNSIGNED GENERATED ALWAYS AS
        (IF(status IN (1, 2), user_id, NULL)) STORED AFTER txn_id;
-- The expiry's scan reads unpaid orders by deadline.
ALTER TABLE voucher_orders
    ADD UNIQUE KEY IF NOT EXISTS uk_orders_active (active_user, voucher_id),
    ADD UNIQUE KEY IF NOT EXISTS uk_orders_txn (txn_id),
    ADD KEY IF NOT EXISTS idx_orders_expiry (status, pay_deadline),
    DROP INDEX IF EXISTS uk_orders_user_voucher;

-- The stock a voucher went on sale with: at every moment stock + unpaid
-- orders + paid orders = initial_stock (cancelled and expired orders gave
-- their unit back); GET /api/vouchers/{id}/stats reads it. Vouchers from
-- before get it from what they hold now: their stock (row and segments)
-- plus their active orders.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS initial_stock INT NULL AFTER stock;
UPDATE seckill_vouchers s
   SET s.initial_stock = s.stock
       + COALESCE((SELECT SUM(g.stock) FROM seckill_stock_segments g
                   WHERE g.voucher_id = s.voucher_id), 0)
       + (SELECT COUNT(*) FROM voucher_orders o
          WHERE o.voucher_id = s.voucher_id AND o.status IN (1, 2))
 WHERE s.initial_stock IS NULL;
