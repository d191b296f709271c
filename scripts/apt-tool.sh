#!/usr/bin/env bash
# Make sure COMMAND is on PATH, installing Debian's PACKAGE when it is missing; fails loudly when it
# cannot, so nothing that needs the tool passes (or runs) by its absence.
# Usage: scripts/apt-tool.sh COMMAND PACKAGE [what it is for]
set -euo pipefail
command=$1 package=$2 purpose=${3:-}

if command -v "$command" >/dev/null 2>&1; then
  exit 0
fi

echo "$command not found; installing Debian's $package package${purpose:+ ($purpose)}" >&2
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else
    echo "FATAL: $command is missing and installing it needs root (apt-get install $package)" >&2
    exit 1
  fi
}
if ! command -v apt-get >/dev/null 2>&1; then
  echo "FATAL: $command is missing and there is no apt-get; install $package by hand" >&2
  exit 1
fi
# Locked by another apt run? Wait for it rather than fail.
as_root apt-get -o DPkg::Lock::Timeout=300 update -qq
DEBIAN_FRONTEND=noninteractive as_root apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$package" >/dev/null

if ! command -v "$command" >/dev/null 2>&1; then
  echo "FATAL: installed the $package package but $command is still not on PATH" >&2
  exit 1
fi
"$command" --version 2>&1 | head -1 >&2 || true
