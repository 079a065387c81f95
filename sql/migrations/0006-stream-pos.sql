-- 0006: an async order's place in its sale's Redis Stream (the entry id as
-- ms << 20 | seq), written with the order: the reconciliation counts the
-- orders up to the place where it read Redis. NULL: a sync order, or an
-- async one from before (earlier than any place). The sale's index
-- (voucher_id, status, stream_pos) covers that count and replaces the
-- index of the voucher alone.
ALTER TABLE voucher_orders
    ADD COLUMN IF NOT EXISTS stream_pos BIGINT UNSIGNED NULL AFTER txn_id;
ALTER TABLE voucher_orders
    ADD KEY IF NOT EXISTS idx_orders_voucher_pos
        (voucher_id, status, stream_pos),
    DROP INDEX IF EXISTS idx_orders_voucher;
