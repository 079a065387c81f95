-- 0004: units owed to async sales' Redis state. A cancel or an expiry of
-- an async sale's order gives its unit back in MySQL and, in the same
-- transaction, records it here; the row goes once Redis has the unit back
-- too (the instances retry until it has). Usually empty.
CREATE TABLE IF NOT EXISTS async_unit_returns (
    order_id    BIGINT UNSIGNED NOT NULL,
    voucher_id  BIGINT UNSIGNED NOT NULL,
    user_id     BIGINT UNSIGNED NOT NULL,
    owed_since  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (order_id),
    KEY idx_returns_since (owed_since)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
