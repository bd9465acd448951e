#!/usr/bin/env bash
# Creates .venv-vision, the separate venv that the suite's torchvision, timm and MosaicML
# Streaming peers run in (the images suite's recipe group, the convert suite's MDSWriter).
#   bash tools/setup_vision.sh
# torchvision's wheel is built against the registry's own torch, not the CPU build of .venv
# (beside which it fails to import), and timm and Streaming's MDSWriter need torchvision: so
# they get a venv of their own with that torch. A second run returns at once (marker file);
# delete .venv-vision to redo it. The CUDA torch pulls NVIDIA's libraries (several GB); it
# runs on the CPU where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vision
MARKER="$VENV/.vision-setup-1"  # bumped when a finished venv must be redone
[ -f "$MARKER" ] && exit 0

# No marker: a half-made venv, or one an older version of this script made: start afresh.
"$PY" -m venv --clear "$VENV"
# pip, with this machine's noise about absent local indexes filtered out; a failure still fails.
pip_q() {
  "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
}
fail() { echo "setup_vision: $*; delete $VENV and rerun" >&2; exit 1; }
echo "setup_vision: making $VENV (torch, torchvision, timm, Streaming) ..."
pip_q install -U pip wheel setuptools || fail "pip could not update itself"
# "===": exactly the registry's build of that version, never a local "+cpu" one that a
# machine's wheel cache offers under the same number (torchvision's C ops need the former).
TORCH="torch===${TORCH_VERSION:-2.13.0}"
pip_q install "$TORCH" "torchvision==${TORCHVISION_VERSION:-0.28.0}" \
  || fail "pip could not install $TORCH and torchvision"
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "$TORCH" > "$constraints"
# timm; what this checkout's datapipe needs to run from its source folder (the suite puts the
# checkout on PYTHONPATH: nothing of it is installed here); webdataset, with which the MDSWriter
# peer reads the tars as the other convert peers do; and Streaming's MDSWriter.
# mosaicml-streaming itself goes in with --no-deps: its requirements add every cloud SDK
# (Azure, Google, OCI, boto3, paramiko), which MDSWriter writing to a local folder never
# imports; these are the ones it does import.
pip_q install -c "$constraints" timm "numpy<2.2" pillow pyarrow msgpack xxhash click tqdm \
  webdataset "transformers<5" Brotli python-snappy zstd catalogue \
  || fail "pip could not install timm and the peers' requirements"
pip_q install -c "$constraints" --no-deps "mosaicml-streaming==${STREAMING_VERSION:-0.13.0}" \
  || fail "pip could not install mosaicml-streaming"
"$VENV/bin/python" -c "import torch, torchvision, timm; from streaming import MDSWriter; \
from torchvision.transforms import v2; from importlib.metadata import version as v; \
print('setup_vision: torch', v('torch'), 'torchvision', v('torchvision'), 'timm', v('timm'), \
'mosaicml-streaming', v('mosaicml-streaming'), 'numpy', v('numpy'))" \
  || fail "the venv is made but torchvision, timm or MDSWriter does not import"
touch "$MARKER"
echo "setup_vision: done in $SECONDS s, $(du -sh "$VENV" | cut -f1)"
