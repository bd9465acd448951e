"""datapipe against its peers: the benchmark suite behind `datapipe bench --suite`.

Installed with the package (`pip install 'datapipe[bench]'` brings the peers), run from any
folder. `Options` says what to run, `run(options)` runs it and writes the report; the groups
(`datapipe.suite.groups`) each say what their peers are and how their figures read, and one
runner (`datapipe.suite.runner`) measures them all the same way.
"""

from __future__ import annotations

from datapipe.suite.options import ALL_SUITES, SUITES, Options, parse_skip
from datapipe.suite.suite import run

__all__ = ["ALL_SUITES", "SUITES", "Options", "parse_skip", "run"]
