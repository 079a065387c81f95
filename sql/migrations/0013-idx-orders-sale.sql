-- 0013: a sale's orders by id, for the admin's pages of
-- GET /api/vouchers/{id}/orders and its CSV export: each page is a range
-- of this index, not a sort of the whole sale. Named apart from the
-- idx_orders_voucher that 0006 dropped.
ALTER TABLE voucher_orders
    ADD KEY IF NOT EXISTS idx_orders_sale (voucher_id, id);
