"""Image loading, datapipe against its peers: `datapipe bench --suite images`, from a checkout
(`python -m benchmarks.bench_loader --repeats 5 --skip dali`). The suite's options apply."""

from __future__ import annotations

import sys

from datapipe.cli import main

if __name__ == "__main__":
    main(["bench", "--suite", "images", *sys.argv[1:]])
