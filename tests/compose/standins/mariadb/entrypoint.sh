#!/bin/bash
# First start (an empty data directory): initialise, create the database
# and user the environment names, run /docker-entrypoint-initdb.d/*.sql
# and *.sh into that database, as the official image does. Then run the
# server as the mysql user, listening on every address.
set -euo pipefail

db=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
user=${MARIADB_USER:-${MYSQL_USER:-}}
pass=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}
root=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
[[ -n $root ]] || { echo "entrypoint: MARIADB_ROOT_PASSWORD is required" >&2; exit 1; }

if [[ ! -d /var/lib/mysql/mysql ]]; then
    echo "entrypoint: initialising /var/lib/mysql"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
        --auth-root-authentication-method=normal --skip-test-db >/dev/null
    mariadbd --user=mysql --skip-networking --socket=/run/mysqld/init.sock &
    pid=$!
    for _ in $(seq 120); do
        mariadb-admin --socket=/run/mysqld/init.sock -uroot ping >/dev/null 2>&1 && break
        sleep 0.5
    done
    sql=(mariadb --socket=/run/mysqld/init.sock -uroot)
    {
        echo "ALTER USER 'root'@'localhost' IDENTIFIED BY '${root//\'/\'\'}';"
        echo "CREATE USER 'root'@'%' IDENTIFIED BY '${root//\'/\'\'}';"
        echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
        if [[ -n $db ]]; then
            echo "CREATE DATABASE IF NOT EXISTS \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;"
        fi
        if [[ -n $user ]]; then
            echo "CREATE USER '$user'@'%' IDENTIFIED BY '${pass//\'/\'\'}';"
            [[ -n $db ]] && echo "GRANT ALL ON \`$db\`.* TO '$user'@'%';"
        fi
        echo "FLUSH PRIVILEGES;"
    } | "${sql[@]}"
    for f in /docker-entrypoint-initdb.d/*; do
        [[ -e $f ]] || continue
        echo "entrypoint: running $f"
        case $f in
        *.sql) "${sql[@]}" -p"$root" ${db:+"$db"} <"$f" ;;
        *.sh) . "$f" ;;
        esac
    done
    mariadb-admin --socket=/run/mysqld/init.sock -uroot -p"$root" shutdown
    wait "$pid" || true
    echo "entrypoint: initialised"
fi
if [[ ${1:-} == mariadbd || ${1:-} == mysqld ]]; then
    shift
    exec mariadbd --user=mysql --bind-address=0.0.0.0 --port=3306 \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_bin "$@"
fi
exec "$@"
