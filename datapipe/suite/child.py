"""The suite's child processes, each fresh:

    python -m datapipe.suite.child GROUP PEER JOB RESULT         a measured run
    python -m datapipe.suite.child --form GROUP FORM JOB RESULT  a converted form

In a measured run the group's peer measures the job (JSON); its record goes to RESULT. A
--before peer runs datapipe from another checkout: the child then drops the datapipe it
started with (all but this suite) so that the peer's own imports load that checkout's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def use_checkout(code: str) -> None:
    sys.path.insert(0, code)
    for module in [m for m in sys.modules if m.split(".")[0] in ("datapipe", "preprocess")
                   and not m.startswith("datapipe.suite")]:
        del sys.modules[module]


def loaded() -> str:
    """Where the datapipe a --before run measured came from (the report can prove it)."""
    import datapipe

    return str(Path(datapipe.__file__).parent.parent)


def main(argv: list[str]) -> int:
    from datapipe.suite.groups import load_group
    from datapipe.suite.runner import BEFORE, CODE_ENV, write_child_result

    if argv[0] == "--form":
        group_name, form, job_json, result = argv[1:]
        job = json.loads(job_json)
        load_group(group_name).forms[form](Path(job["src"]), Path(job["out"]), job["workers"])
        Path(result).write_text("{}")
        return 0
    group_name, peer_name, job_json, result = argv
    group = load_group(group_name)
    peer = next(p for p in group.peers if p.name == peer_name.removesuffix(BEFORE))
    job = group.job_type(**json.loads(job_json))
    code = os.environ.get(CODE_ENV)
    if code:
        use_checkout(code)
    measure = peer.measure
    assert measure is not None, f"{peer_name} is measured by its group, not a child"
    write_child_result(Path(result), lambda: {**measure(job), **({"code": loaded()} if code
                                                                  else {})})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
