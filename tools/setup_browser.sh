#!/usr/bin/env bash
# Installs Debian's chromium, the headless browser that tests/profiling/test_page.py renders
# the profile page with (its DOM read back, its pixels looked at).
#   bash tools/setup_browser.sh
# A second run returns at once (chromium on PATH). Never fails the caller: without root, apt or
# the package, it says why on one line and the page test skips, naming the same reason.
set -uo pipefail
for name in chromium chromium-browser google-chrome google-chrome-stable; do
  command -v "$name" >/dev/null 2>&1 && exit 0
done
skip() { echo "setup_browser: $*; the profile page's browser test will skip" >&2; exit 0; }
command -v apt-get >/dev/null 2>&1 || skip "no apt-get on this machine to install chromium"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || skip "not root, no sudo"
  SUDO="sudo -n"
fi
echo "setup_browser: installing chromium (apt) ..."
log=$(mktemp)
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
       $SUDO apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
  tail -n 3 "$log" >&2
  rm -f "$log"
  skip "apt-get could not install chromium"
fi
rm -f "$log"
