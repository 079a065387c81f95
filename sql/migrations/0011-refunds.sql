-- 0011: payments to give back: a payment refused because its order was
-- closed (cancelled, or expired, also by the payment arriving late) or
-- paid by another transaction already. One row per transaction (the same
-- notification twice is one refund), written in the transaction that
-- refused the payment. status: 0 pending, 1 done (the money went back).
-- reason: 1 late, 2 closed, 3 a second payment of a paid order. done_by is
-- the admin's id.
CREATE TABLE IF NOT EXISTS refunds (
    id          BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    order_id    BIGINT UNSIGNED  NOT NULL,
    txn_id      VARCHAR(64)      NOT NULL,
    amount      BIGINT           NOT NULL,
    reason      TINYINT UNSIGNED NOT NULL,
    status      TINYINT UNSIGNED NOT NULL DEFAULT 0,
    created     DATETIME(3)      NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    done_at     DATETIME(3)      NULL,
    done_by     BIGINT UNSIGNED  NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_refunds_txn (txn_id),
    KEY idx_refunds_status (status, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
