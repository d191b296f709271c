#!/usr/bin/env bash
# The whole pytest-django suite against the real PostgreSQL, RabbitMQ and Redis. Each run gets a
# database, a RabbitMQ vhost and a Redis key prefix of its own, removed afterwards.
#
# Two phases. Most of the suite waits (on worker processes, servers, brokers, timeouts) rather
# than computes, so it runs on TEST_WORKERS pytest-xdist workers (default 2, one a core); each
# worker has a database, vhost and key prefix of its own (pytest-django suffixes the database,
# tests/xdist_isolation.py the vhost and prefix), so no worker sees another's data. The tests
# marked `exclusive` stop the machine's RabbitMQ or PostgreSQL, which every worker uses: they run
# afterwards, alone. TEST_WORKERS=0 runs the first phase in one process too (for --pdb, say).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

scripts/services.sh
scripts/promtool.sh  # the alert-rule tests need promtool; installed here, never skipped
scripts/browser.sh  # the admin browser test needs Debian's chromium; installed here, never skipped

WORKERS=${TEST_WORKERS:-2}
RUN_ID=${TEST_RUN_ID:-$(date +%s)$$}
VHOST="notifications-test-$RUN_ID"
DATABASE="notifications_$RUN_ID"
PREFIX="nt-test-$RUN_ID"
# The run's own names, then each xdist worker's: the same with -gw0, -gw1, … (_gw0 for databases).
VHOSTS=("$VHOST")
DATABASES=("test_$DATABASE")
for ((n = 0; n < WORKERS; n++)); do
  VHOSTS+=("$VHOST-gw$n")
  DATABASES+=("test_${DATABASE}_gw$n")
done
for vhost in "${VHOSTS[@]}"; do
  rabbitmqctl -q add_vhost "$vhost"
  rabbitmqctl -q set_permissions -p "$vhost" guest ".*" ".*" ".*"
done
cleanup() {
  for vhost in "${VHOSTS[@]}"; do
    rabbitmqctl -q delete_vhost "$vhost" >/dev/null 2>&1 || true
  done
  for pattern in "$PREFIX:*" "$PREFIX-gw*"; do
    redis-cli -h 127.0.0.1 --scan --pattern "$pattern" | xargs -r redis-cli -h 127.0.0.1 del >/dev/null 2>&1 || true
  done
  for database in "${DATABASES[@]}"; do
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS \"$database\" WITH (FORCE)" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

export DEBUG=true
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$DATABASE"
export BROKER_URL="amqp://guest:guest@127.0.0.1:5672/$VHOST"
export REDIS_URL="redis://127.0.0.1:6379/0"
export CACHE_KEY_PREFIX="$PREFIX"
export RABBITMQ_VHOST="$VHOST"
export LOG_FORMAT=json

# `python -m pytest`, not the pytest script: the repo root must be first on sys.path so the
# project's `platform` package is the one every `import platform` finds (platform/__init__.py).
# Exit status 5 is "no test selected": fine for one phase (a file with no exclusive test), not both.
phase() {  # name, pytest arguments...
  local name=$1 started=$SECONDS status
  shift
  set +e
  "$PY" -m pytest "$@"
  status=$?
  set -e
  echo "test ($name): $((SECONDS - started)) s"
  return "$status"
}
parallel=0
phase "parallel, $WORKERS workers" -p tests.xdist_isolation -n "$WORKERS" --dist worksteal --exclusive=exclude "$@" || parallel=$?
exclusive=0
phase "exclusive, alone" --exclusive=only "$@" || exclusive=$?

if [ "$parallel" -eq 5 ] && [ "$exclusive" -eq 5 ]; then
  echo "FATAL: pytest collected no tests" >&2
  exit 5
fi
for status in "$parallel" "$exclusive"; do
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    exit "$status"
  fi
done
