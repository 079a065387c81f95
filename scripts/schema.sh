#!/usr/bin/env bash
# schema.sh - write sql/schema.sql from the migrations, or check it.
#
#   scripts/schema.sh [OUT]     write OUT (default sql/schema.sql)
#   scripts/schema.sh --check   exit 1, with the diff, if sql/schema.sql
#                               is not what the migrations make
#
# A scratch database on the private MariaDB of scripts/services.sh
# (SECKILL_MYSQL_PORT; the user seckill may make seckill_mig_* databases)
# is migrated by build/seckilld migrate, dumped without data by
# mariadb-dump, and dropped. The file is the whole schema in one place to
# read, and loads into an empty database as one at the newest version
# (schema_version's rows included); sql/migrations/ stays the source.
set -euo pipefail

die() { echo "schema.sh: error: $*" >&2; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
check=0
out=sql/schema.sql
case ${1:-} in
--check) check=1 ;;
"") ;;
*) out=$1 ;;
esac

PORT=${SECKILL_MYSQL_PORT:-13306}
DB=seckill_mig_schema_$$
BIN=${SECKILL_BIN:-build/seckilld}
[[ -x $BIN ]] || die "$BIN is missing (make build)"
my() { mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$PORT" -u seckill -pseckill "$@"; }

my -e "CREATE DATABASE $DB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" ||
    die "cannot create $DB on 127.0.0.1:$PORT (scripts/services.sh up)"
tmp=$(mktemp)
trap 'rm -f "$tmp"; my -e "DROP DATABASE IF EXISTS $DB" || true' EXIT
SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:$PORT/$DB "$BIN" migrate >/dev/null ||
    die "seckilld migrate of $DB failed"
{
    cat <<'HEAD'
-- The schema of the seckill service as sql/migrations/ makes it, GENERATED
-- by `make schema` (scripts/schema.sh): do not edit; add a migration and
-- run `make schema` (make test checks the two agree). The comments of the
-- migrations say what each table and column is for. Loaded into an empty
-- database it gives one at the newest version (schema_version's rows
-- below); `seckilld migrate` is how databases are made and upgraded.
SET FOREIGN_KEY_CHECKS = 0;
HEAD
    mariadb-dump --no-defaults --protocol=tcp -h 127.0.0.1 -P "$PORT" \
        -u seckill -pseckill --no-data --compact --skip-dump-date \
        --skip-lock-tables "$DB" |
        sed -E -e '/^\/\*M?![0-9]+[ \\]/d' -e 's/ AUTO_INCREMENT=[0-9]+//'
    echo "INSERT INTO schema_version (version, name, checksum) VALUES"
    my -N -B -e "SELECT CONCAT('    (', version, ', ''', name, ''', ''', checksum, ''')')
                 FROM schema_version ORDER BY version" "$DB" | sed '$!s/$/,/; $s/$/;/'
    echo "SET FOREIGN_KEY_CHECKS = 1;"
} >"$tmp"
if ((check)); then
    diff -u sql/schema.sql "$tmp" ||
        die "sql/schema.sql is not what sql/migrations/ makes: run make schema"
    echo "schema.sh: sql/schema.sql agrees with sql/migrations/"
else
    cp "$tmp" "$out"
    echo "schema.sh: wrote $out"
fi
