-- 0017: the Idempotency-Key of admin writes. An admin's create, edit,
-- control, delete, refund-done, ban or unban that carries the header
-- records the key here in the write's own transaction, on the write's own
-- shard (a voucher's shard for its controls; a new voucher's shard is
-- chosen from the key), so the key exists exactly when the write
-- committed: a retry with the same key finds it and changes nothing.
-- request_hash tells a retry of the same request from another request
-- reusing the key; status and answer are the first answer, written right
-- after the commit (NULL until then, or for good if the instance died in
-- between); action and target say what the write was, to answer such a
-- retry from the target as it is now. Kept at least a day (created),
-- then deleted by every instance's expiry thread.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    admin_id     BIGINT UNSIGNED   NOT NULL,
    idem_key     VARBINARY(255)    NOT NULL,
    request_hash BINARY(32)        NOT NULL,
    action       VARCHAR(32)       NOT NULL,
    target_type  VARCHAR(16)       NOT NULL,
    target_id    BIGINT UNSIGNED   NOT NULL DEFAULT 0,
    status       SMALLINT UNSIGNED NULL,
    answer       MEDIUMTEXT        NULL,
    created      DATETIME(3)       NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (admin_id, idem_key),
    KEY idx_idem_created (created)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
