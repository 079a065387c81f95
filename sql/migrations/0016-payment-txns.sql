-- 0016: the order each payment's transaction id is reserved for, with
-- sales sharded over several primaries. uk_orders_txn keeps a provider's
-- transaction from paying two orders of one database, but every shard
-- has its own voucher_orders; this table, on shard 0, is the one place
-- the shards share. A payment about to be recorded reserves its txn_id
-- here first: from another shard in a commit of its own, on shard 0 in
-- the payment's own transaction. An order that finds the id reserved for
-- another order is refused; the order it was reserved for goes on (also
-- when it retries after a crash between the reservation and the
-- payment). One row per transaction, kept. Unused with one primary, and
-- on the shards other than 0.
CREATE TABLE IF NOT EXISTS payment_txns (
    txn_id   VARCHAR(64)     NOT NULL,
    order_id BIGINT UNSIGNED NOT NULL,
    created  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (txn_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
