#!/usr/bin/env bash
# Make sure PostgreSQL, Redis and RabbitMQ are up on this machine, starting any that is down, and
# fail loudly when one cannot be reached. `make test` runs this before the suite.
set -euo pipefail

PG_HOST=${PG_HOST:-127.0.0.1}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
RABBIT_HOST=${RABBIT_HOST:-127.0.0.1}
WAIT_SECONDS=${SERVICES_WAIT_SECONDS:-90}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_for() {  # name, check command...
  local name=$1; shift
  local deadline=$((SECONDS + WAIT_SECONDS))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then
      echo "FATAL: $name is not reachable after ${WAIT_SECONDS}s; the test suite needs it and will not run without it." >&2
      exit 1
    fi
    sleep 1
  done
  echo "services: $name is up"
}

pg_ready() { pg_isready -h "$PG_HOST" -p 5432 -q; }
redis_ready() { [ "$(redis-cli -h "$REDIS_HOST" -p 6379 ping 2>/dev/null)" = "PONG" ]; }
rabbit_ready() { port_open "$RABBIT_HOST" 5672 && rabbitmqctl -q await_startup --timeout 5; }

if ! pg_ready; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
fi
wait_for PostgreSQL pg_ready

if ! redis_ready; then
  echo "services: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
wait_for Redis redis_ready

if ! port_open "$RABBIT_HOST" 5672; then
  echo "services: starting RabbitMQ"
  rabbitmq-server -detached || true
fi
wait_for RabbitMQ rabbit_ready
