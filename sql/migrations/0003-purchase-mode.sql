-- 0003: the purchase mode of a seckill voucher, fixed when it goes on
-- sale: 0 sync (MySQL decides each sale), 1 async (Redis decides and a
-- stream carries the orders to MySQL). Vouchers from before are sync.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS purchase_mode TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER initial_stock;
