-- 0012: what admins did: every change an admin makes (vouchers created
-- and changed, buyers banned, refunds done) and every admin login, written
-- in the transaction of the change itself, so that a change is never
-- without its record and a record never without its change. admin_id is
-- NULL for a failed login (target_id is then the admin whose password was
-- wrong); addr is the client's address (behind a trusted proxy, the one
-- X-Forwarded-For names); change_json is a JSON object of what changed.
CREATE TABLE IF NOT EXISTS audit_log (
    id          BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    created     DATETIME(3)      NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    admin_id    BIGINT UNSIGNED  NULL,
    addr        VARCHAR(64)      NOT NULL DEFAULT '',
    action      VARCHAR(32)      NOT NULL,
    target_type VARCHAR(16)      NOT NULL,
    target_id   BIGINT UNSIGNED  NULL,
    change_json TEXT             NULL,
    PRIMARY KEY (id),
    KEY idx_audit_target (target_type, target_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
