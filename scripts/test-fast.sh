#!/usr/bin/env bash
# The fast tier: the domain's rules on the embedded default (SQLite in memory, Dramatiq's
# StubBroker, the local-memory cache), with no service running or configured. Tests that need
# PostgreSQL, RabbitMQ or Redis are marked `services` (or commit for real) and run in `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

# Whatever the shell has set, this tier names no service.
unset DATABASE_URL BROKER_URL REDIS_URL CACHE_KEY_PREFIX RABBITMQ_VHOST
export TEST_TIER=fast DEBUG=true LOG_FORMAT=json

started=$(date +%s)
set +e
"$PY" -m pytest -n auto "$@"
status=$?
set -e
echo "test-fast: $(( $(date +%s) - started )) s"
if [ "$status" -eq 5 ]; then
  echo "FATAL: pytest collected no tests" >&2
fi
exit "$status"
