-- 0008: admin accounts, apart from buyers (their own id space: an admin
-- token's id is an id here, never a buyer's). pw_hash is libsodium's
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
