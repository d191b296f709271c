#!/usr/bin/env bash
# Make sure `wrk` (Debian's wrk package), the HTTP load generator of `make bench`, is on PATH.
set -euo pipefail
exec "$(dirname "$0")/../scripts/apt-tool.sh" wrk wrk "the accept benchmark's load"
