"""However a training script ends, it ends, and its loader workers end with it: real scripts in
real processes, real signals, worker pids checked in /proc."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.s3server import upload_directory

EXIT_TIMEOUT_S = 60  # a script that has not ended by then hangs
GONE_WITHIN_S = 2.0  # workers must be gone this soon after their parent

SCRIPT = """
import json, os, signal, sys, threading, time
import datapipe as dp

kind, data, pids_file, mode = sys.argv[1:5]

def children():  # every live process this one started: workers, a remote dataset's prefetcher
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        if entry.isdigit() and int(ppid) == os.getpid() and state not in "ZX":
            found.append(int(entry))
    return found

if mode.startswith("handler"):
    # What Lightning (or a preemption hook) installs before the workers fork: log and go on.
    signal.signal(signal.SIGTERM, lambda signum, frame: print("SIGTERM noted", flush=True))
if kind == "tokens":
    loader = dp.TokenLoader(data, max_tokens=128, num_workers=2)
elif kind == "remote":
    loader = dp.Loader(data, batch_size=4, num_workers=2,
                       transform=dp.image.RandomResizedCrop(16))
else:
    loader = dp.Loader(data, batch_size=4, num_workers=2, decode="dali" if kind == "dali"
                       else "cpu", transform=dp.image.RandomResizedCrop(16))

def report():
    with open(pids_file + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "workers": loader.worker_pids,
                   "children": children()}, f)
    os.replace(pids_file + ".tmp", pids_file)

if mode == "thread":  # the pool is forked by a thread that then ends
    t = threading.Thread(target=lambda: next(iter(loader)))
    t.start()
    t.join()
if mode == "fork-child":  # a child forked by the script closes the loader, runs its exit hooks
    next(iter(loader))
    child = os.fork()
    if child == 0:
        loader.close()
        sys.exit(0)
    os.waitpid(child, 0)
    print("epoch after the child's exit:", sum(1 for _ in loader), flush=True)
it = iter(loader)
for _ in range(len(loader) // 2):
    next(it)
report()
if mode in ("forever", "thread", "handler-forever"):
    while True:
        for batch in loader:
            time.sleep(0.01)
print("returning without close()", flush=True)
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exit")
    src = make_image_folder(root / "src", classes=2, per_class=12, size=(32, 24))
    convert("images", src, root / "images", "--short-side", "24", "--workers", "1")
    (root / "a.txt").write_text("\n".join(" ".join(["w"] * (i % 30 + 2)) for i in range(80)))
    convert("text", root / "a.txt", root / "tokens", "--tokenizer", "bytes", "--workers", "1")
    script = root / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return {"images": root / "images", "tokens": root / "tokens", "script": script}


def state(pid: int) -> str | None:
    """A process's state letter, or None once it is gone (a zombie counts as gone: it is dead,
    only not yet reaped by whoever adopted it)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    letter = text[text.rindex(")") + 2]
    return None if letter in "ZX" else letter


def survivors(pids: list[int], within: float) -> list[int]:
    """The pids still alive after waiting up to `within` seconds for them to go."""
    deadline = time.monotonic() + within
    alive = [p for p in pids if state(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if state(p)]
    return alive


def kill_group(process: subprocess.Popen) -> str:
    """Kill a script started in its own session, workers and all; its output so far."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    return process.communicate()[0] or ""


def kill_all(pids: list[int]) -> None:
    """Clean up after a failed check, so that nothing is left running on the machine."""
    for pid in pids:
        if state(pid):
            os.kill(pid, signal.SIGKILL)


def start(data: dict[str, Path], kind: str, mode: str, tmp_path: Path,
          path: str | Path | None = None) -> tuple[subprocess.Popen, Path]:
    pids_file = tmp_path / "pids.json"
    path = path or (data["tokens"] if kind == "tokens" else data["images"])
    process = subprocess.Popen([sys.executable, str(data["script"]), kind, str(path),
                                str(pids_file), mode], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return process, pids_file


def wait_for_pids(process: subprocess.Popen, pids_file: Path) -> dict:
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while not pids_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"script ended or stalled before its first batches:\n"
                        f"{kill_group(process)}")
        time.sleep(0.05)
    return json.loads(pids_file.read_text())


def finish(process: subprocess.Popen) -> tuple[int, str]:
    try:
        out, _ = process.communicate(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the script did not end by itself (a hang at exit):\n"
                    f"{kill_group(process)}")
    return process.returncode, out


def needs_dali(kind: str) -> None:
    if kind == "dali":
        pytest.importorskip("nvidia.dali")


@pytest.mark.parametrize("kind", ["images", "tokens", "dali"])
def test_a_script_with_a_sigterm_handler_that_never_closes_its_loader_exits(
        data: dict[str, Path], tmp_path: Path, kind: str) -> None:
    needs_dali(kind)
    process, pids_file = start(data, kind, "handler", tmp_path)
    code, out = finish(process)
    workers = json.loads(pids_file.read_text())["workers"] if pids_file.exists() else []
    left = survivors(workers, GONE_WITHIN_S)
    kill_all(left)
    assert code == 0 and "returning without close()" in out, out
    assert (len(workers) == 2) == (kind != "dali"), "DALI decodes in threads, not workers"
    assert not left, f"workers {left} outlived the script"


@pytest.mark.parametrize(("kind", "sig"), [("images", signal.SIGKILL),
                                           ("images", signal.SIGTERM),
                                           ("tokens", signal.SIGKILL)])
def test_workers_die_with_a_killed_training_process(data: dict[str, Path], tmp_path: Path,
                                                    kind: str, sig: int) -> None:
    process, pids_file = start(data, kind, "forever", tmp_path)
    workers = wait_for_pids(process, pids_file)["workers"]
    assert len(workers) == 2
    process.send_signal(sig)
    process.wait(EXIT_TIMEOUT_S)
    left = survivors(workers, GONE_WITHIN_S)
    kill_all(left)
    assert not left, f"workers {left} outlived their parent's {signal.Signals(sig).name}"


def test_workers_forked_by_a_finished_thread_serve_on_and_die_with_their_parent(
        data: dict[str, Path], tmp_path: Path) -> None:
    """The kernel's parent-death signal follows the forking thread; the workers' own watch
    of their parent covers a pool started from a thread."""
    process, pids_file = start(data, "images", "thread", tmp_path)
    workers = wait_for_pids(process, pids_file)["workers"]
    time.sleep(0.5)
    assert process.poll() is None and all(state(p) for p in workers), \
        "the workers outlived the thread that forked them, and serve batches"
    process.kill()
    process.wait(EXIT_TIMEOUT_S)
    left = survivors(workers, GONE_WITHIN_S)
    kill_all(left)
    assert not left, f"workers {left} outlived their parent"


def test_a_forked_child_exiting_leaves_the_parents_workers_alone(
        data: dict[str, Path], tmp_path: Path) -> None:
    process, pids_file = start(data, "images", "fork-child", tmp_path)
    code, out = finish(process)
    assert code == 0 and "epoch after the child's exit: 6" in out, out
    kill_all(json.loads(pids_file.read_text())["workers"])


def test_a_forked_child_exiting_leaves_the_parents_prefetcher_alone(
        data: dict[str, Path], tmp_path: Path, s3_bucket: str) -> None:
    """Neither the child's close() (which used to stop it) nor multiprocessing's exit hook in
    the child (which used to SIGTERM it, as one of the child's own) ends the prefetcher."""
    url = f"{s3_bucket}/ds"
    upload_directory(data["images"], url)
    process, pids_file = start(data, "remote", "fork-child", tmp_path, path=url)
    code, out = finish(process)
    pids = json.loads(pids_file.read_text())
    kill_all(pids["children"])
    assert code == 0 and "epoch after the child's exit: 6" in out, out
    assert len(pids["children"]) == 3, f"two workers and the prefetcher, after the child: {pids}"


def test_a_remote_datasets_prefetch_process_does_not_run_the_scripts_sigterm_handler(
        data: dict[str, Path], tmp_path: Path, s3_bucket: str) -> None:
    """A SIGTERM ends the prefetcher as it ends a worker: the script's handler (log and go on)
    used to run in it instead, and kept it alive."""
    url = f"{s3_bucket}/ds"
    upload_directory(data["images"], url)
    process, pids_file = start(data, "remote", "handler-forever", tmp_path, path=url)
    pids = wait_for_pids(process, pids_file)
    prefetcher = sorted(set(pids["children"]) - set(pids["workers"]))
    assert len(prefetcher) == 1, pids
    os.kill(prefetcher[0], signal.SIGTERM)
    left = survivors(prefetcher, GONE_WITHIN_S)
    kill_all(left)
    out = kill_group(process)
    assert not left, f"the prefetcher ran the script's SIGTERM handler and lived on:\n{out}"


@pytest.mark.parametrize("end", ["returns", "killed"])
def test_a_remote_datasets_prefetch_process_ends_with_the_script(
        data: dict[str, Path], tmp_path: Path, s3_bucket: str, end: str) -> None:
    """A loader over a URL starts a shard prefetcher besides its workers; it goes too."""
    url = f"{s3_bucket}/ds"
    upload_directory(data["images"], url)
    process, pids_file = start(data, "remote", "handler" if end == "returns" else "forever",
                               tmp_path, path=url)
    if end == "returns":
        code, out = finish(process)
        assert code == 0, out
        children = json.loads(pids_file.read_text())["children"]
    else:
        children = wait_for_pids(process, pids_file)["children"]
        process.kill()
        process.wait(EXIT_TIMEOUT_S)
    left = survivors(children, GONE_WITHIN_S)
    kill_all(left)
    assert len(children) == 3, "two workers and the prefetcher"
    assert not left, f"processes {left} outlived the script"
