"""A script forks while it iterates a loader: the child is refused in one line, the parent goes
on with exactly the batches an untouched loader gives. Real scripts, real forks (os.fork and
multiprocessing's "fork"), real workers; a run that hangs fails at a timeout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.text.helpers import write_documents

HANG_S = 60  # a script not done by then waits for batches its child took

SCRIPT = """
import hashlib, json, multiprocessing, os, sys
import torch
import datapipe as dp
from datapipe.errors import ArgumentError

kind, data, workers, when = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
REFUSED = 3  # a child's exit code: refused with the one-line error


def make():
    if kind == "tokens":
        return dp.TokenLoader(data, max_tokens=96, num_workers=workers, seed=3)
    return dp.Loader(data, batch_size=4, num_workers=workers, seed=3,
                     transform=dp.image.RandomResizedCrop(16))


def digest(batch):
    h = hashlib.sha1()
    for key in sorted(batch):
        value = batch[key]
        h.update(value.numpy().tobytes() if isinstance(value, torch.Tensor) else
                 repr(value).encode())
    return h.hexdigest()


def refused(action):
    '''The child's exit code: REFUSED with the expected one line, 1 if it got a batch.'''
    try:
        action()
    except ArgumentError as exc:
        message = str(exc)
        ok = f"belongs to process {os.getppid()}" in message and "\\n" not in message
        return REFUSED if ok else 2
    return 1


def in_a_child(action, how):
    '''Run `action` in a forked child; its exit code. "exit": a child that closes the loader
    and ends as scripts do, through its exit hooks.'''
    if how == "multiprocessing":
        child = multiprocessing.get_context("fork").Process(
            target=lambda: sys.exit(refused(action)))
        child.start()
        child.join()
        return child.exitcode
    pid = os.fork()
    if pid == 0:
        if how == "exit":
            loader.close()
            sys.exit(0)
        os._exit(refused(action))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def fork_children(it):
    children = {"iter": in_a_child(lambda: next(iter(loader)), "fork"),
                "exit": in_a_child(None, "exit")}
    if it is not None:  # the parent's own iterator, under way or not yet started
        children["next"] = in_a_child(lambda: next(it), "fork")
        children["multiprocessing"] = in_a_child(lambda: next(it), "multiprocessing")
    return children


with make() as reference:
    expected = [[digest(b) for b in reference] for _ in range(2)]
loader = make()
it = iter(loader)
first = [digest(next(it)) for _ in range(2)]
children = fork_children(it) if when == "mid-pass" else {}
first += [digest(b) for b in it]
it = iter(loader)
if when == "between-passes":
    children = fork_children(it)
second = [digest(b) for b in it]
print(json.dumps({"children": children, "same": [first, second] == expected,
                  "batches": len(first), "workers": len(loader.worker_pids)}), flush=True)
loader.close()
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fork")
    src = make_image_folder(root / "src", classes=2, per_class=12, size=(32, 24))
    convert("images", src, root / "images", "--short-side", "24", "--workers", "1")
    write_documents(root / "tokens", [5 + (i * 7) % 40 for i in range(60)])
    script = root / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return {"images": root / "images", "tokens": root / "tokens", "script": script}


def run_script(data: dict[str, Path], kind: str, workers: int, when: str) -> dict:
    """The script's summary; a run that has not ended within HANG_S fails the test."""
    process = subprocess.Popen(
        [sys.executable, str(data["script"]), kind, str(data[kind]), str(workers), when],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # the script, its child and workers
            os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"hung: the parent waits for batches its child took\n"
                    f"{process.communicate()[0]}")
    assert process.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("when", ["mid-pass", "between-passes"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["tokens", "images"])
def test_a_forked_child_is_refused_and_the_parent_carries_on(
        data: dict[str, Path], kind: str, workers: int, when: str) -> None:
    summary = run_script(data, kind, workers, when)
    assert summary["children"] == {"iter": 3, "next": 3, "multiprocessing": 3, "exit": 0}, \
        "each child is refused in one line naming the parent (exit 3); one closes and exits"
    assert summary["same"], "the parent's batches differ from an untouched loader's"
    assert summary["batches"] >= 4 and summary["workers"] == workers
