#!/usr/bin/env bash
# Creates .venv-ffcv, the separate venv that the FFCV peer of benchmarks/bench_loader.py runs in.
#   bash tools/setup_ffcv.sh
# FFCV wants plain pillow (our .venv has pillow-simd, which shares the PIL package) and builds C
# code against libjpeg-turbo and OpenCV, so it gets a venv of its own. Needs root and apt-get for
# the Debian headers. A second run returns at once (marker file); delete .venv-ffcv to redo it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-ffcv
MARKER="$VENV/.ffcv-setup-2"  # bumped when a finished venv must be redone
[ -f "$MARKER" ] && exit 0

# Debian packages: libturbojpeg for FFCV's JPEG decode, OpenCV for its resizes, pkg-config to
# find both when ffcv's setup.py compiles its extension.
DEBS="libturbojpeg0-dev libopencv-dev pkg-config"
deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
debs_missing() { for deb in $DEBS; do deb_installed "$deb" || return 0; done; return 1; }
if debs_missing; then
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "setup_ffcv: FFCV needs Debian's $DEBS, installed with apt-get as root; install them" \
      "and rerun" >&2
    exit 1
  fi
  echo "setup_ffcv: installing $DEBS with apt-get ..."
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $DEBS >/dev/null 2>&1; }
  apt_install || { apt-get update -qq >/dev/null 2>&1 && apt_install; } || {
    echo "setup_ffcv: apt-get could not install $DEBS" >&2
    exit 1
  }
fi
apt_s=$SECONDS

# No marker: a half-made venv, or one an older version of this script made (with a second
# OpenCV, say, which pip would leave in place): start it afresh.
"$PY" -m venv --clear "$VENV"
# pip, with this machine's noise about absent local indexes filtered out; a failure still fails.
pip_q() {
  "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
}
echo "setup_ffcv: making $VENV (torch CPU, numba, OpenCV, pillow, then ffcv) ..."
pip_q install -U pip wheel setuptools
# torch first, the CPU build this kind of machine carries; the constraints file keeps any later
# requirement from replacing it with a multi-GB CUDA build.
pip_q install "torch==${TORCH_VERSION:-2.13.0}"
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/python" -c "from importlib.metadata import version; print('torch==' + version('torch'))" \
  > "$constraints"
# ffcv's own requirements, but headless OpenCV instead of its opencv-python: both own the cv2
# package, so having both leaves whichever was installed last; ffcv only encodes and resizes
# with it. setuptools and wheel: --no-build-isolation builds ffcv with this venv's own.
pip_q install -c "$constraints" numba opencv-python-headless pillow numpy \
  terminaltables pytorch-pfn-extras fastargs assertpy tqdm psutil setuptools wheel
# ffcv's setup.py imports numpy and finds the system libraries with pkg-config, so it builds
# against this venv rather than in an isolated one. 1.0.2 (the latest) builds and runs with
# numpy 2 on Python 3.11. --no-deps: its requirements are the line above.
pip_q install -c "$constraints" --no-build-isolation --no-deps "ffcv==${FFCV_VERSION:-1.0.2}"
# ffcv.__version__ lags its releases: name the installed distributions instead.
"$VENV/bin/python" -c "import ffcv.loader, torch; from importlib.metadata import version as v; \
print('setup_ffcv: ffcv', v('ffcv'), 'torch', v('torch'), 'numpy', v('numpy'))"
touch "$MARKER"
echo "setup_ffcv: done (apt-get $apt_s s, pip $((SECONDS - apt_s)) s)"
