-- The schema of the seckill service as sql/migrations/ makes it, GENERATED
-- by `make schema` (scripts/schema.sh): do not edit; add a migration and
-- run `make schema` (make test checks the two agree). The comments of the
-- migrations say what each table and column is for. Loaded into an empty
-- database it gives one at the newest version (schema_version's rows
-- below); `seckilld migrate` is how databases are made and upgraded.
SET FOREIGN_KEY_CHECKS = 0;
CREATE TABLE `account_state` (
  `role` tinyint(3) unsigned NOT NULL,
  `account_id` bigint(20) unsigned NOT NULL,
  `token_gen` int(10) unsigned NOT NULL DEFAULT 0,
  `banned_at` datetime(3) DEFAULT NULL,
  `banned_by` bigint(20) unsigned DEFAULT NULL,
  PRIMARY KEY (`role`,`account_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `admins` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `username` varchar(64) NOT NULL,
  `pw_hash` varchar(128) NOT NULL,
  `disabled` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_admins_username` (`username`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `async_unit_returns` (
  `order_id` bigint(20) unsigned NOT NULL,
  `voucher_id` bigint(20) unsigned NOT NULL,
  `user_id` bigint(20) unsigned NOT NULL,
  `owed_since` datetime(3) NOT NULL DEFAULT current_timestamp(3),
  PRIMARY KEY (`order_id`),
  KEY `idx_returns_since` (`owed_since`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `audit_log` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `created` datetime(3) NOT NULL DEFAULT current_timestamp(3),
  `admin_id` bigint(20) unsigned DEFAULT NULL,
  `addr` varchar(64) NOT NULL DEFAULT '',
  `action` varchar(32) NOT NULL,
  `target_type` varchar(16) NOT NULL,
  `target_id` bigint(20) unsigned DEFAULT NULL,
  `change_json` text DEFAULT NULL,
  `origin_shard` smallint(5) unsigned DEFAULT NULL,
  `origin_id` bigint(20) unsigned DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_audit_origin` (`origin_shard`,`origin_id`),
  KEY `idx_audit_target` (`target_type`,`target_id`,`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `idempotency_keys` (
  `admin_id` bigint(20) unsigned NOT NULL,
  `idem_key` varbinary(255) NOT NULL,
  `request_hash` binary(32) NOT NULL,
  `action` varchar(32) NOT NULL,
  `target_type` varchar(16) NOT NULL,
  `target_id` bigint(20) unsigned NOT NULL DEFAULT 0,
  `status` smallint(5) unsigned DEFAULT NULL,
  `answer` mediumtext DEFAULT NULL,
  `created` datetime(3) NOT NULL DEFAULT current_timestamp(3),
  PRIMARY KEY (`admin_id`,`idem_key`),
  KEY `idx_idem_created` (`created`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `lock_fences` (
  `name` varbinary(255) NOT NULL,
  `token` bigint(20) unsigned NOT NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `payment_txns` (
  `txn_id` varchar(64) NOT NULL,
  `order_id` bigint(20) unsigned NOT NULL,
  `created` datetime(3) NOT NULL DEFAULT current_timestamp(3),
  PRIMARY KEY (`txn_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `refunds` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `order_id` bigint(20) unsigned NOT NULL,
  `txn_id` varchar(64) NOT NULL,
  `amount` bigint(20) NOT NULL,
  `reason` tinyint(3) unsigned NOT NULL,
  `status` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `created` datetime(3) NOT NULL DEFAULT current_timestamp(3),
  `done_at` datetime(3) DEFAULT NULL,
  `done_by` bigint(20) unsigned DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_refunds_txn` (`txn_id`),
  KEY `idx_refunds_status` (`status`,`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `schema_version` (
  `version` int(10) unsigned NOT NULL,
  `name` varchar(128) NOT NULL,
  `checksum` char(64) NOT NULL,
  `applied_at` datetime(3) NOT NULL DEFAULT current_timestamp(3),
  PRIMARY KEY (`version`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `seckill_stock_segments` (
  `voucher_id` bigint(20) unsigned NOT NULL,
  `segment` smallint(5) unsigned NOT NULL,
  `stock` int(11) NOT NULL,
  `halt` tinyint(3) unsigned NOT NULL DEFAULT 0,
  PRIMARY KEY (`voucher_id`,`segment`),
  CONSTRAINT `fk_segment_seckill` FOREIGN KEY (`voucher_id`) REFERENCES `seckill_vouchers` (`voucher_id`) ON DELETE CASCADE,
  CONSTRAINT `ck_segment_stock` CHECK (`stock` >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `seckill_vouchers` (
  `voucher_id` bigint(20) unsigned NOT NULL,
  `stock` int(11) NOT NULL,
  `initial_stock` int(11) DEFAULT NULL,
  `purchase_mode` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `sale_stamp` bigint(20) unsigned DEFAULT NULL,
  `admission` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `halt` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `revision` int(10) unsigned NOT NULL DEFAULT 0,
  `restocked` int(11) NOT NULL DEFAULT 0,
  `begin_time` datetime NOT NULL,
  `end_time` datetime NOT NULL,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  `updated` datetime NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  PRIMARY KEY (`voucher_id`),
  CONSTRAINT `fk_seckill_voucher` FOREIGN KEY (`voucher_id`) REFERENCES `vouchers` (`id`) ON DELETE CASCADE,
  CONSTRAINT `ck_seckill_stock` CHECK (`stock` >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `shard_outbox` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `created` datetime(3) NOT NULL DEFAULT current_timestamp(3),
  `kind` tinyint(3) unsigned NOT NULL,
  `order_id` bigint(20) unsigned DEFAULT NULL,
  `txn_id` varchar(64) DEFAULT NULL,
  `amount` bigint(20) DEFAULT NULL,
  `reason` tinyint(3) unsigned DEFAULT NULL,
  `admin_id` bigint(20) unsigned DEFAULT NULL,
  `addr` varchar(64) DEFAULT NULL,
  `action` varchar(32) DEFAULT NULL,
  `target_type` varchar(16) DEFAULT NULL,
  `target_id` bigint(20) unsigned DEFAULT NULL,
  `change_json` text DEFAULT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `users` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `phone` varchar(20) DEFAULT NULL,
  `phone_raw` varchar(20) DEFAULT NULL,
  `merged_into` bigint(20) unsigned DEFAULT NULL,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_users_phone` (`phone`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `voucher_orders` (
  `id` bigint(20) unsigned NOT NULL,
  `user_id` bigint(20) unsigned NOT NULL,
  `voucher_id` bigint(20) unsigned NOT NULL,
  `status` tinyint(3) unsigned NOT NULL DEFAULT 1,
  `pay_deadline` datetime(3) DEFAULT NULL,
  `pay_time` datetime(3) DEFAULT NULL,
  `close_time` datetime(3) DEFAULT NULL,
  `txn_id` varchar(64) DEFAULT NULL,
  `stream_pos` bigint(20) unsigned DEFAULT NULL,
  `active_user` bigint(20) unsigned GENERATED ALWAYS AS (if(`status` in (1,2),`user_id`,NULL)) STORED,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  `updated` datetime NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_orders_active` (`active_user`,`voucher_id`),
  UNIQUE KEY `uk_orders_txn` (`txn_id`),
  KEY `idx_orders_user` (`user_id`,`id`),
  KEY `idx_orders_expiry` (`status`,`pay_deadline`),
  KEY `idx_orders_voucher_pos` (`voucher_id`,`status`,`stream_pos`),
  KEY `idx_orders_sale` (`voucher_id`,`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE `vouchers` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `shop_id` bigint(20) unsigned NOT NULL,
  `title` varchar(255) NOT NULL,
  `sub_title` varchar(255) NOT NULL DEFAULT '',
  `rules` varchar(1024) NOT NULL DEFAULT '',
  `pay_value` bigint(20) unsigned NOT NULL,
  `actual_value` bigint(20) unsigned NOT NULL,
  `type` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  `updated` datetime NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp(),
  PRIMARY KEY (`id`),
  KEY `idx_vouchers_shop` (`shop_id`,`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO schema_version (version, name, checksum) VALUES
    (1, '0001-initial', '0a1ca737010512012db5de17a38813c9e738032fc8fc453b05d9888b6c27b521'),
    (2, '0002-order-lifecycle', 'b669821eb05b0bea91cfdc2b1db99b55a2d9c4dcdadf109721183e704ab1d8c3'),
    (3, '0003-purchase-mode', '90325e1cdecd880221b4aa9db2c0d079d264bece66b60c431cfa63f71c5cca4f'),
    (4, '0004-async-unit-returns', 'fb97e75ea82f4609bf8ffb32c4ad9941ace51c5b98a26812f3f00b4eb9c4e397'),
    (5, '0005-sale-stamp', '81e750e5f788e79f8292682dd26ec670d117f9d0cbf0221857ff5c147d3e5be9'),
    (6, '0006-stream-pos', 'ee1d567f21b3b0efa4dbfc422b6c95ce7aeb866124f7e4222e071f893ba21d1d'),
    (7, '0007-account-state', '0c9640c87e7c0155c22dac75f0cf791d7be191c37491789d9d13fbf26f533dcd'),
    (8, '0008-admins', 'c11502f8a05d6f16faaab9b651ec458c6e1171681afd1c7018f295569f69a6ad'),
    (9, '0009-admission', '467f0b67a1f8100c552fb007a2ca5e8a8bc4743a94d6db034e5cd9225aa23651'),
    (10, '0010-users-e164', '0190362b098898335349c75436e2491d854c94066ded0b1e50d0f058202c2ab8'),
    (11, '0011-refunds', 'e78d14cf085e022cc2167c422fc78dd7e1ea92daa9c2533d38b8eee28fa0ddfc'),
    (12, '0012-audit-log', 'dae26d632ab608128db41ec92825b1f104809d08714a8ec6139c3eb1e111543b'),
    (13, '0013-idx-orders-sale', '36ab2887dcdb69c4d1ed8a01f405105f552dd86db4a691e05d2170122fd613d2'),
    (14, '0014-sale-controls', '7c67f5d5bb7f61b2b9567ace0c67ea184a34bac33cd7d558eea49550744aa9d2'),
    (15, '0015-outbox', '89bdc894429580cd85b45d0c2ecba372036038a311ab348493994ecaf24a64c6'),
    (16, '0016-payment-txns', '2c974fed8311bc7b98f4ae5f1e31d774620f43ef295167c35511bd2676566cd9'),
    (17, '0017-idempotency-keys', '70ad28154a07373d34d35f86f683ab2a1338604e7e9e5e22b79aeaaff2cd3fa9');
SET FOREIGN_KEY_CHECKS = 1;
