# The two commands a newcomer needs: `make demo` (the main job end to end on a generated
# sample) and `make test`. Both set up .venv on first use.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint bench clean

setup: $(VENV)/.datapipe-setup-2

$(VENV)/.datapipe-setup-2: pyproject.toml setup.py $(wildcard datapipe/image/*.c datapipe/image/*.h) tools/setup.sh
	bash tools/setup.sh

demo: setup
	bash tools/demo.sh

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .

# Every peer side by side (images, text, convert, gpu): bench-results/suite.md, .json, *.png.
# FFCV, a peer of the images suite, needs its own venv and Debian packages (root); torchvision,
# timm and Streaming (the recipe group, the MDSWriter rows) another venv. Without them the suite
# lists those peers as not installed and runs the rest.
bench: setup
	bash tools/setup_ffcv.sh || echo "FFCV peer not installed; the suite runs without it"
	bash tools/setup_vision.sh || echo "torchvision/timm/Streaming peers not installed; the suite runs without them"
	$(VENV)/bin/datapipe bench --suite all

clean:
	rm -rf $(VENV) .venv-ffcv .venv-vision demo-out bench-data bench-results
