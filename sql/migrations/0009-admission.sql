-- 0009: admission of a seckill voucher, fixed when it goes on sale: 0 open
-- (anyone may buy), 1 queue (only buyers the waiting room admitted, with a
-- ticket). Vouchers from before are open.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS admission TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER sale_stamp;
