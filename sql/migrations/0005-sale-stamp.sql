-- 0005: an async sale's creation stamp, a random number drawn when it is
-- created. Its state in Redis carries it, so that a late first preheat
-- leaves a sale a reconciliation already made from this row (and replaces
-- a stale one of an earlier database). NULL: sync, or an async sale from
-- before.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS sale_stamp BIGINT UNSIGNED NULL
        AFTER purchase_mode;
