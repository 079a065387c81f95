-- 0007: what outlives a bearer token, per account: role 1 a buyer
-- (users.id, or a load-test user without a row), 2 an admin (admins.id).
-- token_gen goes up with every "log out everywhere": tokens carry the
-- generation they were issued under and older ones are refused. A banned
-- buyer's requests are refused. Every instance keeps a copy in memory
-- (sale/sessions.c), told of changes over Redis pub/sub; requests never
-- read this table. banned_by is the admin's id.
CREATE TABLE IF NOT EXISTS account_state (
    role        TINYINT UNSIGNED NOT NULL,
    account_id  BIGINT UNSIGNED  NOT NULL,
    token_gen   INT UNSIGNED     NOT NULL DEFAULT 0,
    banned_at   DATETIME(3)      NULL,
    banned_by   BIGINT UNSIGNED  NULL,
    PRIMARY KEY (role, account_id)
) ENGINE = InnoDB;
