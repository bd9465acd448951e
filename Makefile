# The two commands a newcomer needs: `make demo` (the main job end to end on a generated
# sample) and `make test`. Both set up .venv on first use.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint bench clean

setup: $(VENV)/.datapipe-setup-2

$(VENV)/.datapipe-setup-2: pyproject.toml setup.py datapipe/image/_jpeg.c datapipe/image/resample.c datapipe/image/resample.h tools/setup.sh
	bash tools/setup.sh

demo: setup
	bash tools/demo.sh

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	bash tools/setup.sh --bench
	$(PY) -m benchmarks.bench_convert
	$(PY) -m benchmarks.bench_loader
	$(PY) -m benchmarks.bench_text
	$(PY) -m benchmarks.bench_profiler
	$(PY) -m benchmarks.bench_gpu
	$(PY) -m benchmarks.bench_handoff

clean:
	rm -rf $(VENV) demo-out bench-data bench-results
