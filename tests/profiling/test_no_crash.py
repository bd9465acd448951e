"""The profiler works around every loader kind, with and without workers, and with whatever
records a loader sends; `datapipe profile` says when the profiled command crashed."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import datapipe as dp
from tests.conftest import convert, run_cli_process
from tests.imagegen import make_image_folder
from tests.profiling.planted import PlantedLoader

HAS_DALI = importlib.util.find_spec("nvidia.dali") is not None
KINDS = ["images-cpu", pytest.param("images-dali", marks=pytest.mark.skipif(
    not HAS_DALI, reason="needs NVIDIA DALI")), "tokens", "torch-dataloader", "list"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    src = make_image_folder(root / "src", classes=2, per_class=12, size=(64, 48))
    convert("images", src, root / "images", "--short-side", "48")
    (root / "a.txt").write_text("".join(f"document {i} " * (i % 7 + 1) + "\n"
                                        for i in range(120)))
    convert("text", root / "a.txt", root / "tokens", "--tokenizer", "bytes")
    return {"images": root / "images", "tokens": root / "tokens"}


class Numbers(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": torch.full((3,), float(i))}


def make_iterable(kind: str, workers: int, data: dict[str, Path]):
    crop = dp.image.RandomResizedCrop(32)
    if kind.startswith("images"):
        return dp.Loader(data["images"], batch_size=4, num_workers=workers,
                         decode=kind.removeprefix("images-"), transform=crop)
    if kind == "tokens":
        return dp.TokenLoader(data["tokens"], max_tokens=256, num_workers=workers)
    if kind == "torch-dataloader":
        return torch.utils.data.DataLoader(Numbers(), batch_size=4, num_workers=workers)
    return [{"x": torch.full((4,), float(i))} for i in range(6)]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_every_loader_kind_profiles_to_every_output(kind: str, workers: int,
                                                    data: dict[str, Path],
                                                    tmp_path: Path) -> None:
    iterable = make_iterable(kind, workers, data)
    files = {"report": tmp_path / "r.json", "trace": tmp_path / "t.json",
             "html": tmp_path / "p.html"}
    with dp.profile(**files, scaling_test=True, warmup_steps=2, probe_steps=2) as prof:
        for _ in prof.wrap(iterable):
            time.sleep(0.001)
            prof.step()
    if hasattr(iterable, "close"):
        iterable.close()
    text = prof.report()
    assert text.startswith("datapipe profile: ") and "Traceback" not in text
    saved = json.loads(files["report"].read_text())
    assert saved["verdict"]["regime"] in ("input-bound", "compute-bound", "overhead-bound")
    assert saved["steps"] >= 5 and "oracle" in saved["probes"]
    assert json.loads(files["trace"].read_text())["traceEvents"]
    assert "<svg" in files["html"].read_text()


ODD_RECORDS = [
    {},
    {"queue": None, "timing": None},
    {"queue": {"ready": 2}},
    {"queue": {"ready": None, "capacity": 4}},
    {"queue": {"ready": "2", "capacity": 4}, "timing": {"stages": None}},
    {"timing": {"pid": 1, "start": None, "end": 2.0, "stages": {"decode": "slow"}}},
    {"timing": {"pid": 7, "stages": {"decode": 0.01}}, "queue": {"ready": 0, "capacity": 2}},
]


def test_odd_loader_records_are_read_without_a_crash(tmp_path: Path) -> None:
    def meta(b: int, now: float) -> dict:
        return dict(ODD_RECORDS[b % len(ODD_RECORDS)])

    loader = PlantedLoader(2 * len(ODD_RECORDS), meta, main_s=0.0005, blocked_s=0.001)
    with dp.profile(report=tmp_path / "r.json", trace=tmp_path / "t.json",
                    html=tmp_path / "p.html", oracle=True) as prof:
        for _ in prof.wrap(loader):
            prof.step()
    result = prof.results()
    assert result["steps"] == 14 and result["verdict"]["text"]
    assert result["queue"] == {"mean_ready": 0.0, "capacity": 2, "empty_fraction": 1.0,
                               "full_fraction": 0.0}  # the one record giving both, twice
    assert result["stages"]["worker_seconds"] == pytest.approx({"decode": 0.02})
    assert prof.report().startswith("datapipe profile: ")


def test_a_block_that_raises_gets_no_verdict(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), dp.profile(report=tmp_path / "r.json") as prof:
        for i, _ in enumerate(prof.wrap([{"x": torch.zeros(2)}] * 10)):
            if i == 6:
                raise RuntimeError("out of memory")
            prof.step()
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["verdict"]["regime"] == "incomplete"
    assert saved["verdict"]["text"].startswith("no verdict: the profiled code raised "
                                               "RuntimeError after 7 steps")
    assert "bound" not in prof.report().splitlines()[0]


def test_too_few_steps_say_so() -> None:
    with dp.profile() as prof:
        for _ in prof.wrap([1, 2]):
            prof.step()
    assert prof.results()["verdict"]["regime"] == "unknown"
    assert "too few steps to judge" in prof.report()


# ---------------------------------------------------------------- datapipe profile


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text("import os, signal, sys, time\nimport torch\nimport datapipe as dp\n"
                      + body)
    return script


def test_cli_profiles_every_loader_kind_in_one_script(data: dict[str, Path],
                                                      tmp_path: Path) -> None:
    decoders = ["cpu", "dali"] if HAS_DALI else ["cpu"]
    script = _script(tmp_path, f"""
crop = dp.image.RandomResizedCrop(32)
loaders = [dp.Loader({str(data['images'])!r}, batch_size=4, num_workers=w, decode=d,
                     transform=crop) for d in {decoders!r} for w in (0, 2)]
loaders += [dp.TokenLoader({str(data['tokens'])!r}, max_tokens=256, num_workers=w)
            for w in (0, 2)]
plain = [torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=w)
         for w in (0, 2)] + [[1, 2, 3]]
for loader in loaders + plain:
    for batch in loader:
        time.sleep(0.001)
""")
    prefix = tmp_path / "prof"
    result = run_cli_process("profile", "--out", prefix, "--oracle", "--", sys.executable,
                             script)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.startswith("datapipe profile: ")
    saved = json.loads(Path(f"{prefix}.json").read_text())
    assert saved["source"] == "Loader, TokenLoader"
    assert saved["verdict"]["regime"] != "incomplete"


def test_cli_says_the_command_crashed_and_exits_with_its_code(tmp_path: Path) -> None:
    script = _script(tmp_path, """
for i, batch in enumerate(dp.TokenLoader(sys.argv[1], max_tokens=256, num_workers=0)):
    if i == 5:
        raise RuntimeError("CUDA out of memory")
""")
    prefix = tmp_path / "prof"
    (tmp_path / "a.txt").write_text("".join(f"doc {i} " * 9 + "\n" for i in range(80)))
    convert("text", tmp_path / "a.txt", tmp_path / "t", "--tokenizer", "bytes")
    result = run_cli_process("profile", "--out", prefix, "--", sys.executable, script,
                             tmp_path / "t")
    assert result.returncode == 1
    assert "RuntimeError: CUDA out of memory" in result.stderr  # the script's own traceback
    first = result.stdout.splitlines()[0]
    assert first.startswith("datapipe profile: no verdict: the command exited with code 1: "
                            "the script raised RuntimeError after 6 steps"), first
    assert "partial report" in first and "bound" not in result.stdout
    saved = json.loads(Path(f"{prefix}.json").read_text())
    assert saved["verdict"]["regime"] == "incomplete" and saved["steps"] == 6
    assert "no verdict" in Path(f"{prefix}.txt").read_text().splitlines()[0]
    assert "bound" not in Path(f"{prefix}.html").read_text().split("</h1>")[0]
    trace = json.loads(Path(f"{prefix}.trace.json").read_text())
    assert trace["otherData"]["verdict"].startswith("no verdict")


def test_cli_exit_code_and_signal_of_the_command_are_passed_on(tmp_path: Path,
                                                              data: dict[str, Path]) -> None:
    script = _script(tmp_path, f"""
for i, batch in enumerate(dp.Loader({str(data['images'])!r}, batch_size=4, num_workers=0,
                                    transform=dp.image.RandomResizedCrop(32))):
    if i == 3:
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(3)
""")
    prefix = tmp_path / "prof"
    result = run_cli_process("profile", "--out", prefix, "--", sys.executable, script, "exit")
    assert result.returncode == 3
    assert result.stdout.startswith("datapipe profile: no verdict: the command exited with "
                                    "code 3 after 4 steps")
    result = run_cli_process("profile", "--out", prefix, "--", sys.executable, script, "kill")
    assert result.returncode == 128 + signal.SIGKILL
    assert "killed by signal 9 (SIGKILL) before writing a profile" in result.stderr
    assert not result.stdout and not Path(f"{prefix}.json").exists()  # no stale report


def test_cli_ctrl_c_interrupts_the_command_and_reports_it(tmp_path: Path,
                                                          data: dict[str, Path]) -> None:
    started = tmp_path / "started"
    script = _script(tmp_path, f"""
loader = dp.Loader({str(data['images'])!r}, batch_size=4, num_workers=0,
                   transform=dp.image.RandomResizedCrop(32))
for epoch in range(10_000):
    for batch in loader:
        open({str(started)!r}, "w").close()
        time.sleep(0.01)
""")
    prefix = tmp_path / "prof"
    # As a terminal does: Ctrl-C signals the whole foreground process group.
    proc = subprocess.Popen([sys.executable, "-m", "datapipe.cli", "profile", "--out",
                             str(prefix), "--", sys.executable, str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert out.startswith("datapipe profile: no verdict: the command was killed by signal 2 "
                          "(SIGINT): the script raised KeyboardInterrupt"), out
    assert "datapipe: interrupted" not in err


def test_cli_a_command_that_cannot_run_is_one_line(tmp_path: Path) -> None:
    not_executable = tmp_path / "train.sh"
    not_executable.write_text("echo hi\n")
    for program in (tmp_path / "missing", not_executable):
        result = run_cli_process("profile", "--out", tmp_path / "prof", "--", program)
        assert result.returncode == 2, result.stderr
        assert f"cannot run '{program}'" in result.stderr and "Traceback" not in result.stderr
