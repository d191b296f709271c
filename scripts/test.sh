#!/usr/bin/env bash
# The whole pytest-django suite against the real PostgreSQL, RabbitMQ and Redis. Each run gets a
# database, a RabbitMQ vhost and a Redis key prefix of its own, removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

scripts/services.sh
scripts/promtool.sh  # the alert-rule tests need promtool; installed here, never skipped
scripts/browser.sh  # the admin browser test needs Debian's chromium; installed here, never skipped

RUN_ID=${TEST_RUN_ID:-$(date +%s)$$}
VHOST="notifications-test-$RUN_ID"
rabbitmqctl -q add_vhost "$VHOST"
rabbitmqctl -q set_permissions -p "$VHOST" guest ".*" ".*" ".*"
cleanup() {
  rabbitmqctl -q delete_vhost "$VHOST" >/dev/null 2>&1 || true
  redis-cli -h 127.0.0.1 --scan --pattern "nt-test-$RUN_ID:*" | xargs -r redis-cli -h 127.0.0.1 del >/dev/null 2>&1 || true
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS \"test_notifications_$RUN_ID\" WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

export DEBUG=true
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/notifications_$RUN_ID"
export BROKER_URL="amqp://guest:guest@127.0.0.1:5672/$VHOST"
export REDIS_URL="redis://127.0.0.1:6379/0"
export CACHE_KEY_PREFIX="nt-test-$RUN_ID"
export RABBITMQ_VHOST="$VHOST"
export LOG_FORMAT=json

# `python -m pytest`, not the pytest script: the repo root must be first on sys.path so the
# project's `platform` package is the one every `import platform` finds (platform/__init__.py).
set +e
"$PY" -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "FATAL: pytest collected no tests" >&2
fi
exit "$status"
