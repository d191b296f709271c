#!/usr/bin/env bash
# Make sure `promtool` (Debian's prometheus package) is on PATH, for the alert-rule tests.
# Installs it when missing; fails loudly when it cannot, so the rule tests never pass by absence.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  exit 0
fi

echo "promtool not found; installing Debian's prometheus package" >&2
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else
    echo "FATAL: promtool is missing and installing it needs root (apt-get install prometheus)" >&2
    exit 1
  fi
}
if ! command -v apt-get >/dev/null 2>&1; then
  echo "FATAL: promtool is missing and there is no apt-get; install Prometheus' promtool by hand" >&2
  exit 1
fi
# Locked by another apt run? Wait for it rather than fail (helpers may install at the same time).
as_root apt-get -o DPkg::Lock::Timeout=300 update -qq
DEBIAN_FRONTEND=noninteractive as_root apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a Prometheus server where an init system runs; only promtool is wanted.
command -v systemctl >/dev/null 2>&1 && as_root systemctl disable --now prometheus >/dev/null 2>&1 || true

if ! command -v promtool >/dev/null 2>&1; then
  echo "FATAL: installed the prometheus package but promtool is still not on PATH" >&2
  exit 1
fi
promtool --version 2>&1 | head -1 >&2
