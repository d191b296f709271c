#!/usr/bin/env bash
# Make sure `promtool` (Debian's prometheus package) is on PATH, for the alert-rule tests; never skipped.
set -euo pipefail
here=$(dirname "$0")
if ! command -v promtool >/dev/null 2>&1; then
  "$here/apt-tool.sh" promtool prometheus "the alert-rule tests"
  # The package starts a Prometheus server where an init system runs; only promtool is wanted.
  command -v systemctl >/dev/null 2>&1 && systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
