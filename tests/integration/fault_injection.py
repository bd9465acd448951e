"""Fault injection: SIGKILL a training process at random moments, then count what it left.

    python -m tests.integration.fault_injection [--kills 20] [--seed 0]

Each round starts a real training process (a small CNN over a generated dataset, fed by a
2-worker `dp.Loader`), and once it trains, kills it with SIGKILL after a random delay (an
epoch lasts about as long as the shortest delays, so kills land mid-epoch, between epochs and
while the workers start the next one), then looks for what outlived it: worker processes (its
children, found by pid just before the kill), their resident memory and the batch buffers
(memfds) they still map, and new entries in /dev/shm (other programs on the machine may add
some). Goal: nothing left, every worker gone within GONE_WITHIN_S. Writes
bench-results/fault_injection.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import build_once
from datapipe.suite.machine import describe, machine_line
from datapipe.suite.report import markdown_table

GONE_WITHIN_S = 1.0  # the goal: workers die this soon after their parent
LOOK_FOR_S = 5.0  # how long to watch for survivors before counting them as left behind
DELAY_S = (0.0, 3.0)  # kill after a uniform random delay in this range once training runs
START_TIMEOUT_S = 120
SHM = Path("/dev/shm")

CHILD = """
import sys, torch
import datapipe as dp
torch.set_num_threads(1)
loader = dp.Loader(sys.argv[1], batch_size=32, num_workers=2, seed=0,
                   transform=dp.image.RandomResizedCrop(32) | dp.image.Normalize())
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(8, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
started = False
while True:  # epochs until killed
    for batch in loader:
        if not started:
            print("training", flush=True)
            started = True
        loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"] % 4)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


# ---------------------------------------------------------------- /proc


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie is dead (only not yet reaped by whoever adopted it)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            parents[int(entry)] = int(fields[1])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        children = [c for c, p in parents.items() if p == pid]
        found.extend(children)
        todo.extend(children)
    return found


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memfd_bytes(pid: int) -> int:
    """Bytes of memfd mappings (the loader's batch buffers) a process still holds."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if "memfd:" in line:
                start, end = line.split()[0].split("-")
                total += int(end, 16) - int(start, 16)
    except OSError:
        pass
    return total


def shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM))
    except OSError:
        return set()


# ---------------------------------------------------------------- one kill


def kill_once(data: Path, delay: float) -> dict[str, Any]:
    """Start training, SIGKILL it after `delay` s, report what outlived it."""
    shm_before = shm_entries()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ready, _, _ = select.select([child.stdout], [], [], START_TIMEOUT_S)
    line = child.stdout.readline() if ready else ""
    time.sleep(delay)
    if line != "training\n" or child.poll() is not None:
        os.killpg(child.pid, signal.SIGKILL)
        return {"delay_s": delay, "error": f"training did not run: {line.strip()[:200]}"}
    workers = descendants(child.pid)  # just before the kill: the workers, if started
    child.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    child.wait(START_TIMEOUT_S)
    child.stdout.close()
    left = list(workers)
    gone_after = 0.0
    while left and time.monotonic() - killed_at < LOOK_FOR_S:
        time.sleep(0.01)
        left = [p for p in left if alive(p)]
        gone_after = time.monotonic() - killed_at
    record = {"delay_s": round(delay, 2), "workers": len(workers), "survivors": len(left),
              "gone_after_s": round(gone_after, 3) if workers else 0.0,
              "survivor_rss_mb": round(sum(rss_bytes(p) for p in left) / 1e6, 1),
              "survivor_memfd_mb": round(sum(memfd_bytes(p) for p in left) / 1e6, 1),
              "new_shm": sorted(shm_entries() - shm_before)}
    for pid in left:  # leave the machine as it was
        os.kill(pid, signal.SIGKILL)
    return record


# ---------------------------------------------------------------- the report


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [r for r in records if "error" not in r]
    with_workers = [r for r in runs if r["workers"]]
    return {
        "kills": len(records), "failed_runs": len(records) - len(runs),
        "kills_with_workers": len(with_workers),
        "workers_killed_with": sum(r["workers"] for r in runs),
        "survivors": sum(r["survivors"] for r in runs),
        "late": sum(1 for r in with_workers if r["gone_after_s"] > GONE_WITHIN_S),
        "slowest_gone_s": max((r["gone_after_s"] for r in with_workers), default=0.0),
        "survivor_rss_mb": sum(r["survivor_rss_mb"] for r in runs),
        "survivor_memfd_mb": sum(r["survivor_memfd_mb"] for r in runs),
        "new_shm": sorted({e for r in runs for e in r["new_shm"]}),
    }


def report(records: list[dict[str, Any]], summary: dict[str, Any]) -> tuple[str, bool]:
    rows = [[i + 1, f"{r['delay_s']:.2f}", r.get("workers", "–"), r.get("survivors", "–"),
             f"{r['gone_after_s']:.3f}" if r.get("workers") else "–",
             r.get("survivor_rss_mb", "–"), r.get("survivor_memfd_mb", "–"),
             len(r.get("new_shm", [])) if "error" not in r else r["error"][:60]]
            for i, r in enumerate(records)]
    table = markdown_table(["kill", "after s", "workers", "left", "all gone after s",
                            "left RSS MB", "left memfd MB", "new /dev/shm"], rows)
    # /dev/shm is the machine's: entries made meanwhile by other programs show, but do not
    # count against the goal (the loader's buffers are memfds, counted in survivors' maps).
    ok = (summary["failed_runs"] == 0 and summary["survivors"] == 0 and summary["late"] == 0
          and summary["survivor_memfd_mb"] == 0 and summary["kills_with_workers"] > 0)
    line = (f"{summary['kills']} SIGKILLs ({summary['kills_with_workers']} with workers "
            f"running, {summary['workers_killed_with']} workers): {summary['survivors']} "
            f"left behind, slowest gone after {summary['slowest_gone_s']:.2f} s "
            f"(goal <= {GONE_WITHIN_S:.0f} s), {summary['survivor_rss_mb']:.0f} MB RSS and "
            f"{summary['survivor_memfd_mb']:.0f} MB of batch buffers held, "
            f"{len(summary['new_shm'])} new /dev/shm entries (any program's). "
            f"Goal (nothing left behind): {'met' if ok else 'NOT met'}")
    return f"# Fault injection: SIGKILL of a training process\n\n{table}\n\n{line}", ok


def make_dataset(out: Path) -> None:
    from tools.make_sample_data import convert, make_photo_folder

    make_photo_folder(out / "photos", images=256, classes=4, seed=0)
    convert("images", out / "photos", out / "images", "--short-side", "48", "--workers", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="rounds (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="for the random delays")
    parser.add_argument("--data", type=Path, default=Path("bench-data", "fault-injection"),
                        help="where the generated dataset is kept")
    parser.add_argument("--out", type=Path, default=Path("bench-results"),
                        help="where fault_injection.md and .json are written")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error(f"--kills must be >= 1, got {args.kills}")
    info = describe()
    print(f"Machine: {machine_line(info)}", flush=True)
    data = build_once(args.data, "making a 256-photo dataset ...", make_dataset) / "images"
    rng = random.Random(args.seed)
    records = []
    for i in range(args.kills):
        delay = rng.uniform(*DELAY_S)
        print(f"kill {i + 1}/{args.kills} after {delay:.2f} s ...", end=" ", flush=True)
        records.append(kill_once(data, delay))
        r = records[-1]
        print(r.get("error") or f"{r['workers']} workers, {r['survivors']} left", flush=True)
    summary = summarise(records)
    text, ok = report(records, summary)
    print("\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    md, js = args.out / "fault_injection.md", args.out / "fault_injection.json"
    md.write_text(text + "\n")
    js.write_text(json.dumps({"machine": info, "kills": records, "summary": summary,
                              "goal_met": ok}, indent=2) + "\n")
    print(f"\nsaved {md} and {js}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
