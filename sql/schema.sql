-- Schema of the seckill service (MariaDB 10.11 / MySQL 8.0, InnoDB, utf8mb4).
-- Loaded by scripts/services.sh and by docker-compose; every statement is
-- idempotent so loading it twice is harmless. All times are UTC. A database
-- made by an older version is brought up to date by sql/upgrade-mariadb.sql
-- (scripts/services.sh applies it after this file).

-- phone is the E.164 form (+8613800138000). Rows from before phones were
-- normalised get it from `seckilld users normalize`, which keeps the old
-- form in phone_raw; when two rows turn out to be one number, the older
-- keeps the phone and the other gets phone NULL and merged_into its id.
CREATE TABLE IF NOT EXISTS users (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    phone       VARCHAR(20)     NULL,
    phone_raw   VARCHAR(20)     NULL,
    merged_into BIGINT UNSIGNED NULL,
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
-- initial_stock is the stock it went on sale with: at every moment
-- stock + unpaid orders + paid orders = initial_stock (cancelled and
-- expired orders gave their unit back).
CREATE TABLE IF NOT EXISTS seckill_vouchers (
    voucher_id    BIGINT UNSIGNED NOT NULL,
    stock         INT             NOT NULL,
    initial_stock INT             NULL,
    -- 0: sync (MySQL decides each sale), 1: async (Redis decides and a
    -- stream carries the orders to MySQL); fixed when it goes on sale.
    purchase_mode TINYINT UNSIGNED NOT NULL DEFAULT 0,
    -- An async sale's creation stamp, a random number drawn when it is
    -- created: its state in Redis carries it, so that a late first
    -- preheat leaves a sale a reconciliation already made from this row
    -- (and replaces a stale one of an earlier database). NULL: sync.
    sale_stamp    BIGINT UNSIGNED NULL,
    -- 0: open (anyone may buy), 1: queue (only buyers the waiting room
    -- admitted, with a ticket); fixed when it goes on sale.
    admission     TINYINT UNSIGNED NOT NULL DEFAULT 0,
    -- The operator's controls: halt 0 on sale, 1 paused, 2 stopped (its
    -- end_time is when); revision counts the controls applied to the row
    -- (an async sale's Redis state carries the revision it has applied);
    -- restocked the units added to (or, before the begin, taken from) the
    -- initial stock since the creation, which the reconciliation uses to
    -- tell a restock on its way to Redis from a disagreement.
    halt          TINYINT UNSIGNED NOT NULL DEFAULT 0,
    revision      INT UNSIGNED    NOT NULL DEFAULT 0,
    restocked     INT             NOT NULL DEFAULT 0,
    begin_time    DATETIME        NOT NULL,
    end_time      DATETIME        NOT NULL,
    created       DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated       DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP
                                  ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (voucher_id),
    CONSTRAINT ck_seckill_stock CHECK (stock >= 0),
    CONSTRAINT fk_seckill_voucher FOREIGN KEY (voucher_id)
        REFERENCES vouchers (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Segmented stock (seed 003, section 8; SECKILL_STOCK_SEGMENTS=N > 1): a
-- voucher created with N segments keeps its stock here, split over N rows,
-- and 0 in seckill_vouchers.stock, so that concurrent purchases lock
-- different rows. A voucher's stock is always its seckill_vouchers.stock
-- plus the sum of its segments (none for an unsegmented voucher).
CREATE TABLE IF NOT EXISTS seckill_stock_segments (
    voucher_id  BIGINT UNSIGNED   NOT NULL,
    segment     SMALLINT UNSIGNED NOT NULL,
    stock       INT               NOT NULL,
    -- The voucher's halt, copied: a purchase's CAS on a segment sees a
    -- pause or a stop on the row it locks.
    halt        TINYINT UNSIGNED  NOT NULL DEFAULT 0,
    PRIMARY KEY (voucher_id, segment),
    CONSTRAINT ck_segment_stock CHECK (stock >= 0),
    CONSTRAINT fk_segment_seckill FOREIGN KEY (voucher_id)
        REFERENCES seckill_vouchers (voucher_id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- id comes from the Redis ID worker (idgen/), not AUTO_INCREMENT.
-- status: 1 = unpaid, 2 = paid, 4 = cancelled, 7 = expired (3, 5 and 6 are
-- reserved: used, refunding, refunded). An unpaid order is closed when its
-- pay_deadline passes (expired) or its owner cancels it; either returns its
-- unit to the stock in the same transaction. No foreign keys on the
-- purchase path: they would take extra row locks inside the hot
-- transaction, and load-test users (minted with `seckilld tokens`) need
-- not have a users row.
CREATE TABLE IF NOT EXISTS voucher_orders (
    id           BIGINT UNSIGNED NOT NULL,
    user_id      BIGINT UNSIGNED NOT NULL,
    voucher_id   BIGINT UNSIGNED NOT NULL,
    status       TINYINT UNSIGNED NOT NULL DEFAULT 1,
    pay_deadline DATETIME(3)     NULL, -- NULL: never expires
    pay_time     DATETIME(3)     NULL,
    close_time   DATETIME(3)     NULL,
    txn_id       VARCHAR(64)     NULL, -- the payment provider's transaction
    -- An async order's place in its sale's Redis Stream (the entry id as
    -- ms << 20 | seq), written with the order: the reconciliation counts
    -- the orders up to the place where it read Redis. NULL: a sync order,
    -- or an async one from before.
    stream_pos   BIGINT UNSIGNED NULL,
    -- The user while the order is active (unpaid or paid), else NULL: a
    -- unique key over it allows one active order per user and voucher and
    -- any number of closed ones.
    active_user  BIGINT UNSIGNED GENERATED ALWAYS AS
                 (IF(status IN (1, 2), user_id, NULL)) STORED,
    created      DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated      DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP
                                 ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    -- The last line of defence for one active order per user and voucher.
    UNIQUE KEY uk_orders_active (active_user, voucher_id),
    UNIQUE KEY uk_orders_txn (txn_id),
    KEY idx_orders_user (user_id, id),
    -- A sale's orders by status, and (covered) up to a stream position.
    KEY idx_orders_voucher_pos (voucher_id, status, stream_pos),
    -- A sale's orders by id: the admin's pages and the CSV export (keyset
    -- pages on the id, without sorting the whole sale each page).
    KEY idx_orders_sale (voucher_id, id),
    -- The expiry's scan: unpaid orders by deadline.
    KEY idx_orders_expiry (status, pay_deadline)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Units owed to async sales' Redis state: a cancel or an expiry of an
-- async sale's order gives its unit back in MySQL and, in the same
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

-- Fencing tokens of the MySQL lock backend (lock/mysql.c): one row per lock
-- name, token bumped on every acquire. The backend also creates it lazily.
CREATE TABLE IF NOT EXISTS lock_fences (
    name        VARBINARY(255)  NOT NULL,
    token       BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;

-- What outlives a bearer token, per account: role 1 a buyer (users.id, or
-- a load-test user without a row), 2 an admin (admins.id). token_gen goes
-- up with every "log out everywhere": tokens carry the generation they were
-- issued under and older ones are refused. A banned buyer's requests are
-- refused. Every instance keeps a copy in memory (sale/sessions.c), told
-- of changes over Redis pub/sub; requests never read this table.
CREATE TABLE IF NOT EXISTS account_state (
    role        TINYINT UNSIGNED NOT NULL,
    account_id  BIGINT UNSIGNED  NOT NULL,
    token_gen   INT UNSIGNED     NOT NULL DEFAULT 0,
    banned_at   DATETIME(3)      NULL,
    banned_by   BIGINT UNSIGNED  NULL, -- the admin's id
    PRIMARY KEY (role, account_id)
) ENGINE = InnoDB;

-- Admin accounts, apart from buyers (their own id space: an admin token's
-- id is an id here, never a buyer's). pw_hash is libsodium's
-- crypto_pwhash_str (Argon2id, with its parameters and salt). Made with
-- `seckilld admin add --username NAME` (the password on standard input).
CREATE TABLE IF NOT EXISTS admins (
    id          BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    username    VARCHAR(64)      NOT NULL,
    pw_hash     VARCHAR(128)     NOT NULL,
    disabled    TINYINT UNSIGNED NOT NULL DEFAULT 0,
    created     DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY uk_admins_username (username)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Payments to give back: a payment refused because its order was closed
-- (cancelled, or expired, also by the payment arriving late) or paid by
-- another transaction already. One row per transaction (the same
-- notification twice is one refund), written in the transaction that
-- refused the payment. status: 0 pending, 1 done (the money went back).
-- reason: 1 late, 2 closed, 3 a second payment of a paid order.
CREATE TABLE IF NOT EXISTS refunds (
    id          BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    order_id    BIGINT UNSIGNED  NOT NULL,
    txn_id      VARCHAR(64)      NOT NULL,
    amount      BIGINT           NOT NULL,
    reason      TINYINT UNSIGNED NOT NULL,
    status      TINYINT UNSIGNED NOT NULL DEFAULT 0,
    created     DATETIME(3)      NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    done_at     DATETIME(3)      NULL,
    done_by     BIGINT UNSIGNED  NULL, -- the admin's id
    PRIMARY KEY (id),
    UNIQUE KEY uk_refunds_txn (txn_id),
    KEY idx_refunds_status (status, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- What admins did: every change an admin makes (vouchers created and
-- changed, buyers banned, refunds done) and every admin login, written in
-- the transaction of the change itself, so that a change is never without
-- its record and a record never without its change. admin_id is NULL for
-- a failed login (target_id is then the admin whose password was wrong);
-- addr is the client's address (behind a trusted proxy, the one
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
