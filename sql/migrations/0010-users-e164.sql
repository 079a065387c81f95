-- 0010: phones in E.164 form (+8613800138000). Rows from before phones
-- were normalised get it from `seckilld users normalize`, which keeps the
-- old form in phone_raw; when two rows turn out to be one number, the
-- older keeps the phone and the other gets phone NULL and merged_into its
-- id (hence phone becomes nullable). This file only makes room; the
-- command rewrites the rows.
ALTER TABLE users
    MODIFY COLUMN phone VARCHAR(20) NULL,
    ADD COLUMN IF NOT EXISTS phone_raw VARCHAR(20) NULL AFTER phone,
    ADD COLUMN IF NOT EXISTS merged_into BIGINT UNSIGNED NULL AFTER phone_raw;
