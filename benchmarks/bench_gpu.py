"""Loading onto the GPU and the training thread's hand-off: `datapipe bench --suite gpu`, from
a checkout (`python -m benchmarks.bench_gpu --repeats 5`). The suite's options apply."""

from __future__ import annotations

import sys

from datapipe.cli import main

if __name__ == "__main__":
    main(["bench", "--suite", "gpu", *sys.argv[1:]])
