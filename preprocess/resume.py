"""The conversion journal: what a killed run finished, so rerunning the command resumes it.

One JSON line per finished shard, appended (and fsynced) after the shard's atomic rename:
the shard, how many inputs were consumed when it closed, and the rejects among them. A rerun
with the same fingerprint keeps those shards and starts again at the first unconsumed input;
since shard boundaries depend only on the inputs, the result is byte-identical to a clean run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.format.destination import JOURNAL_NAME
from datapipe.format.manifest import ShardInfo


@dataclass
class ResumeState:
    """The intact prefix of a previous run: its journal entries, in order."""

    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def shards(self) -> list[ShardInfo]:
        return [ShardInfo.from_json(e["shard"]) for e in self.entries]

    @property
    def inputs_done(self) -> int:
        return int(self.entries[-1]["inputs_done"]) if self.entries else 0

    @property
    def resume_point(self) -> dict[str, Any] | None:
        """Where the converter may start reading again, if it said (see OutputDirectory)."""
        return self.entries[-1].get("resume") if self.entries else None

    @property
    def rejects(self) -> list[dict[str, Any]]:
        return [r for e in self.entries for r in e["rejects"]]


class Journal:
    def __init__(self, directory: Path, fingerprint: str) -> None:
        self.path = directory / JOURNAL_NAME
        self.fingerprint = fingerprint

    def exists(self) -> bool:
        return self.path.is_file()

    def start(self) -> None:
        self._append({"fingerprint": self.fingerprint}, mode="w")

    def record(self, shard: ShardInfo, inputs_done: int, rejects: list[dict[str, Any]],
               resume_point: dict[str, Any] | None = None) -> None:
        entry = {"shard": shard.to_json(), "inputs_done": inputs_done, "rejects": rejects}
        self._append(entry if resume_point is None else {**entry, "resume": resume_point})

    def load(self) -> ResumeState:
        """Read a previous run's journal; a torn last line (killed mid-write) is ignored."""
        lines = self.path.read_text().splitlines()
        entries = []
        for line in lines:
            try:
                entries.append(json.loads(line))
            except ValueError:
                break
        if not entries:
            return ResumeState()  # stopped while starting the journal: nothing was finished
        if entries[0].get("fingerprint") != self.fingerprint:
            raise ArgumentError(
                f"{self.path.parent}: holds an interrupted conversion with other inputs or "
                "settings; rerun with the same ones to resume, or pass --overwrite")
        state = ResumeState()
        for entry in entries[1:]:
            if not _shard_intact(self.path.parent, ShardInfo.from_json(entry["shard"])):
                break  # keep the intact prefix; the rest is redone
            state.entries.append(entry)
        return state

    def rewrite(self, state: ResumeState) -> None:
        """Start the journal afresh with the kept prefix (drops a torn or stale tail)."""
        self.start()
        for entry in state.entries:
            self._append(entry)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def _append(self, obj: dict[str, Any], mode: str = "a") -> None:
        with open(self.path, mode) as f:
            f.write(json.dumps(obj) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _shard_intact(directory: Path, shard: ShardInfo) -> bool:
    # Size only: the hash was taken after the rename and the file is never written again.
    # `datapipe verify` re-hashes everything when the user wants certainty.
    path = directory / shard.name
    return path.is_file() and path.stat().st_size == shard.bytes
