-- 0001: the schema as it was before the order lifecycle: users, vouchers,
-- the flash sale's hot row, segmented stock, orders (one per user and
-- voucher, of any status) and the MySQL lock backend's fencing tokens.
-- Every later file changes it in place. All times are UTC.

CREATE TABLE IF NOT EXISTS users (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    phone       VARCHAR(20)     NOT NULL,
    created     DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY uk_users_phone (phone)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Money is in cents. type: 0 = normal, 1 = seckill.
CREATE TABLE IF NOT EXISTS vouchers (
    id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    shop_id      BIGINT UNSIGNED NOT NULL,
    title        VARCHAR(255)    NOT NULL,
    sub_title    VARCHAR(255)    NOT NULL DEFAULT '',
    rules        VARCHAR(1024)   NOT NULL DEFAULT '',
    pay_value    BIGINT UNSIGNED NOT NULL,
    actual_value BIGINT UNSIGNED NOT NULL,
    type         TINYINT UNSIGNED NOT NULL DEFAULT 0,
    created      DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated      DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP
                                 ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    KEY idx_vouchers_shop (shop_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The hot row of a flash sale: one per seckill voucher. The CHECK is a
-- belt to the CAS update's braces (MariaDB enforces it; MySQL >= 8.0.16 too).
CREATE TABLE IF NOT EXISTS seckill_vouchers (
    voucher_id  BIGINT UNSIGNED NOT NULL,
    stock       INT             NOT NULL,
    begin_time  DATETIME        NOT NULL,
    end_time    DATETIME        NOT NULL,
    created     DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated     DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP
                                ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (voucher_id),
    CONSTRAINT ck_seckill_stock CHECK (stock >= 0),
    CONSTRAINT fk_seckill_voucher FOREIGN KEY (voucher_id)
        REFERENCES vouchers (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Segmented stock (SECKILL_STOCK_SEGMENTS=N > 1): a
-- voucher created with N segments keeps its stock here, split over N rows,
-- and 0 in seckill_vouchers.stock, so that concurrent purchases lock
-- different rows. A voucher's stock is always its seckill_vouchers.stock
-- plus the sum of its segments (none for an unsegmented voucher).
CREATE TABLE IF NOT EXISTS seckill_stock_segments (
    voucher_id  BIGINT UNSIGNED   NOT NULL,
    segment     SMALLINT UNSIGNED NOT NULL,
    stock       INT               NOT NULL,
    PRIMARY KEY (voucher_id, segment),
    CONSTRAINT ck_segment_stock CHECK (stock >= 0),
    CONSTRAINT fk_segment_seckill FOREIGN KEY (voucher_id)
        REFERENCES seckill_vouchers (voucher_id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- id comes from the Redis ID worker (idgen/), not AUTO_INCREMENT.
-- status: 1 = unpaid, 2 = paid, 3 = used, 4 = cancelled, 5 = refunding,
-- 6 = refunded. No foreign keys on the purchase path: they would take extra
-- row locks inside the hot transaction, and load-test users (minted with
-- `seckilld tokens`) need not have a users row.
CREATE TABLE IF NOT EXISTS voucher_orders (
    id          BIGINT UNSIGNED NOT NULL,
    user_id     BIGINT UNSIGNED NOT NULL,
    voucher_id  BIGINT UNSIGNED NOT NULL,
    status      TINYINT UNSIGNED NOT NULL DEFAULT 1,
    created     DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated     DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP
                                ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    -- The last line of defence for one order per user and voucher.
    UNIQUE KEY uk_orders_user_voucher (user_id, voucher_id),
    KEY idx_orders_user (user_id, id),
    KEY idx_orders_voucher (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Fencing tokens of the MySQL lock backend (lock/mysql.c): one row per lock
-- name, token bumped on every acquire. The backend also creates it lazily.
CREATE TABLE IF NOT EXISTS lock_fences (
    name        VARBINARY(255)  NOT NULL,
    token       BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;
