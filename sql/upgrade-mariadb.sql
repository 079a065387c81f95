-- Brings a database made by an older schema.sql up to date, in place and
-- idempotently (MariaDB's IF [NOT] EXISTS; a fresh database made by
-- schema.sql passes through unchanged). scripts/services.sh runs it after
-- schema.sql on every start. MySQL has no IF NOT EXISTS for columns: start
-- a MySQL database from schema.sql.

-- The order lifecycle: pay deadline, pay and close times, the payment's
-- transaction, and one active (unpaid or paid) order per user and voucher
-- instead of one order of any status. Orders from before have no deadline
-- and never expire.
ALTER TABLE voucher_orders
    ADD COLUMN IF NOT EXISTS pay_deadline DATETIME(3) NULL AFTER status,
    ADD COLUMN IF NOT EXISTS pay_time DATETIME(3) NULL AFTER pay_deadline,
    ADD COLUMN IF NOT EXISTS close_time DATETIME(3) NULL AFTER pay_time,
    ADD COLUMN IF NOT EXISTS txn_id VARCHAR(64) NULL AFTER close_time,
    ADD COLUMN IF NOT EXISTS active_user BIGINT UNSIGNED GENERATED ALWAYS AS
        (IF(status IN (1, 2), user_id, NULL)) STORED AFTER txn_id;
ALTER TABLE voucher_orders
    ADD UNIQUE KEY IF NOT EXISTS uk_orders_active (active_user, voucher_id),
    ADD UNIQUE KEY IF NOT EXISTS uk_orders_txn (txn_id),
    ADD KEY IF NOT EXISTS idx_orders_expiry (status, pay_deadline),
    DROP INDEX IF EXISTS uk_orders_user_voucher;

-- The stock a voucher went on sale with, for the lifecycle's invariant
-- (stock + unpaid + paid = initial) and GET /api/vouchers/{id}/stats.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS initial_stock INT NULL AFTER stock;
UPDATE seckill_vouchers s
   SET s.initial_stock = s.stock
       + COALESCE((SELECT SUM(g.stock) FROM seckill_stock_segments g
                   WHERE g.voucher_id = s.voucher_id), 0)
       + (SELECT COUNT(*) FROM voucher_orders o
          WHERE o.voucher_id = s.voucher_id AND o.status IN (1, 2))
 WHERE s.initial_stock IS NULL;

-- The purchase mode (0 sync, 1 async), fixed when a voucher goes on sale.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS purchase_mode TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER initial_stock;

-- An async order's place in its sale's Redis Stream, for the
-- reconciliation (orders from before have none and count as earlier than
-- any place). The sale's index covers it; it replaces the index of
-- (voucher_id, status) that older schemas had.
ALTER TABLE voucher_orders
    ADD COLUMN IF NOT EXISTS stream_pos BIGINT UNSIGNED NULL AFTER txn_id;
ALTER TABLE voucher_orders
    ADD KEY IF NOT EXISTS idx_orders_voucher_pos
        (voucher_id, status, stream_pos),
    DROP INDEX IF EXISTS idx_orders_voucher;

-- An async sale's creation stamp (async sales from before have none).
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS sale_stamp BIGINT UNSIGNED NULL
        AFTER purchase_mode;

-- Admission (0 open, 1 through the waiting room), fixed when a voucher
-- goes on sale; vouchers from before are open.
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS admission TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER sale_stamp;

-- Phones in E.164 form: the old form kept, and rows merged into another
-- (schema.sql says what they are; `seckilld users normalize` fills them).
ALTER TABLE users
    MODIFY COLUMN phone VARCHAR(20) NULL,
    ADD COLUMN IF NOT EXISTS phone_raw VARCHAR(20) NULL AFTER phone,
    ADD COLUMN IF NOT EXISTS merged_into BIGINT UNSIGNED NULL AFTER phone_raw;

-- Token generations and bans (schema.sql says what they are).
CREATE TABLE IF NOT EXISTS account_state (
    role        TINYINT UNSIGNED NOT NULL,
    account_id  BIGINT UNSIGNED  NOT NULL,
    token_gen   INT UNSIGNED     NOT NULL DEFAULT 0,
    banned_at   DATETIME(3)      NULL,
    banned_by   BIGINT UNSIGNED  NULL,
    PRIMARY KEY (role, account_id)
) ENGINE = InnoDB;

-- Admin accounts (schema.sql says what they are).
CREATE TABLE IF NOT EXISTS admins (
    id          BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    username    VARCHAR(64)      NOT NULL,
    pw_hash     VARCHAR(128)     NOT NULL,
    disabled    TINYINT UNSIGNED NOT NULL DEFAULT 0,
    created     DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY uk_admins_username (username)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Payments to give back (schema.sql says what they are).
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

-- What admins did (schema.sql says what it holds).
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

-- A sale's orders by id, for GET /api/vouchers/{id}/orders and its CSV
-- export (schema.sql says why). Named apart from the idx_orders_voucher
-- dropped above.
ALTER TABLE voucher_orders
    ADD KEY IF NOT EXISTS idx_orders_sale (voucher_id, id);

-- The operator's controls of a sale (schema.sql says what they are).
ALTER TABLE seckill_vouchers
    ADD COLUMN IF NOT EXISTS halt TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER admission,
    ADD COLUMN IF NOT EXISTS revision INT UNSIGNED NOT NULL DEFAULT 0
        AFTER halt,
    ADD COLUMN IF NOT EXISTS restocked INT NOT NULL DEFAULT 0 AFTER revision;
ALTER TABLE seckill_stock_segments
    ADD COLUMN IF NOT EXISTS halt TINYINT UNSIGNED NOT NULL DEFAULT 0
        AFTER stock;
