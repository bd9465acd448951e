"""Token loading, datapipe against its peers: `datapipe bench --suite text`, from a
checkout (`python -m benchmarks.bench_text --repeats 5`). The suite's options apply."""

from __future__ import annotations

import sys

from datapipe.cli import main

if __name__ == "__main__":
    main(["bench", "--suite", "text", *sys.argv[1:]])
