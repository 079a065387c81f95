-- 0015: rows of shard 0 decided by a transaction of another shard. With
-- sales sharded over several primaries, refunds and the audit log live on
-- shard 0, but a refund of a refused payment, or the audit record of a
-- change to a voucher, is decided in a transaction on the voucher's own
-- shard. That transaction writes the row here, on its own shard, so that
-- it commits or rolls back with the change; once committed it is copied
-- to shard 0 and deleted from here (right after the commit, and by every
-- instance's expiry thread for what a crash left behind). kind 1 is a
-- refund (order_id .. reason), kind 2 an audit record (admin_id ..
-- change_json); created is when the change was made, and the copy keeps
-- it. The copy is idempotent: a refund by its txn_id (uk_refunds_txn), an
-- audit record by where it came from (origin_shard, origin_id: this row's
-- shard and id; NULL for records written on shard 0 itself).
CREATE TABLE IF NOT EXISTS shard_outbox (
    id          BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    created     DATETIME(3)      NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    kind        TINYINT UNSIGNED NOT NULL,
    order_id    BIGINT UNSIGNED  NULL,
    txn_id      VARCHAR(64)      NULL,
    amount      BIGINT           NULL,
    reason      TINYINT UNSIGNED NULL,
    admin_id    BIGINT UNSIGNED  NULL,
    addr        VARCHAR(64)      NULL,
    action      VARCHAR(32)      NULL,
    target_type VARCHAR(16)      NULL,
    target_id   BIGINT UNSIGNED  NULL,
    change_json TEXT             NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
ALTER TABLE audit_log
    ADD COLUMN IF NOT EXISTS origin_shard SMALLINT UNSIGNED NULL,
    ADD COLUMN IF NOT EXISTS origin_id BIGINT UNSIGNED NULL,
    ADD UNIQUE KEY IF NOT EXISTS uk_audit_origin (origin_shard, origin_id);
