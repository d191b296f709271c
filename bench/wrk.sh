#!/usr/bin/env bash
# Make sure `wrk` (Debian's wrk package), the HTTP load generator of `make bench`, is on PATH.
# Installs it when missing; fails loudly when it cannot, so the bench never runs without its load.
set -euo pipefail

if command -v wrk >/dev/null 2>&1; then
  exit 0
fi

echo "wrk not found; installing Debian's wrk package" >&2
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else
    echo "FATAL: wrk is missing and installing it needs root (apt-get install wrk)" >&2
    exit 1
  fi
}
if ! command -v apt-get >/dev/null 2>&1; then
  echo "FATAL: wrk is missing and there is no apt-get; install wrk (https://github.com/wg/wrk) by hand" >&2
  exit 1
fi
# Locked by another apt run? Wait for it rather than fail (helpers may install at the same time).
as_root apt-get -o DPkg::Lock::Timeout=300 update -qq
DEBIAN_FRONTEND=noninteractive as_root apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends wrk >/dev/null

if ! command -v wrk >/dev/null 2>&1; then
  echo "FATAL: installed the wrk package but wrk is still not on PATH" >&2
  exit 1
fi
wrk --version 2>&1 | head -1 >&2 || true
