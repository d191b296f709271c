#!/usr/bin/env bash
# Headless Chromium for the admin's browser test: Debian's package at /usr/bin/chromium, driven by
# Playwright (which must never download a browser build of its own). Fails loudly if it cannot.
set -euo pipefail
CHROMIUM=/usr/bin/chromium

if [ ! -x "$CHROMIUM" ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "FATAL: $CHROMIUM is missing and apt-get is not available to install Debian's chromium" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "installing Debian's chromium (apt-get)..." >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi

if ! "$CHROMIUM" --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1; then
  echo "FATAL: $CHROMIUM is installed but does not start" >&2
  exit 1
fi
