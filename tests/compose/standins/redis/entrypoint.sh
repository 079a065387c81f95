#!/bin/bash
# redis-server as the redis user in /data, reachable from other containers.
set -euo pipefail
if [[ ${1:-} == redis-server ]]; then
    shift
    exec setpriv --reuid=redis --regid=redis --init-groups \
        redis-server --bind 0.0.0.0 --protected-mode no --dir /data "$@"
fi
exec "$@"
