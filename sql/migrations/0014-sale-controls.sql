-- 0014: the operator's controls of a sale (pause, resume, stop, restock,
-- edit). halt: 0 on sale, 1 paused, 2 stopped (its end_time is when), on
-- the sale row and copied on each stock segment, so that a purchase's
-- compare-and-set sees a pause or a stop on the row it locks; revision
-- counts the controls applied to the row (an async sale's Redis state
-- carries the revision it has); restocked counts the units added to (or,
-- before the begin, taken from) the initial stock since the creation,
-- which the reconciliation uses to tell a restock on its way to Redis
-- from a disagreement. All default to 0: a sale from before is on sale,
-- never controlled.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS halt TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER admission,
    ADD COLUMN IF NOT EXISTS revision INT UNSIGNED NOT NULL DEFAULT 0
        AFTER halt,
    ADD COLUMN IF NOT EXISTS restocked INT NOT NULL DEFAULT 0 AFTER revision;
ALTER TABLE seckill_stock_segments
    ADD COLUMN IF NOT EXISTS halt TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER stock;
