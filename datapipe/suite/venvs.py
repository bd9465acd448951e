"""The venvs of their own that some peers run in (FFCV's; torchvision's, timm's and Streaming's),
each made by a script of tools/ in a checkout, and how the suite finds one: the folder its
environment variable names, else ./NAME in the working directory, else NAME beside the checkout
datapipe runs from. A venv counts once its script has written its marker file, last."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]  # the folder holding datapipe/ and tools/


@dataclass(frozen=True)
class Venv:
    name: str  # its folder's name, e.g. ".venv-ffcv"
    env_var: str  # where a user may point the suite at it instead
    marker: str  # the file its set-up script writes last
    script: str  # that script, relative to a checkout

    @property
    def hint(self) -> str:
        """How to make it, for a peer's "not installed (...)" status."""
        return f"run bash {self.script}"

    def path(self) -> Path:
        if os.environ.get(self.env_var):
            return Path(os.environ[self.env_var])
        here, beside = Path(self.name), CHECKOUT / self.name
        return here if here.exists() or not beside.exists() else beside

    def python(self) -> Path:
        return self.path() / "bin" / "python"

    def ready(self) -> bool:
        """True once the set-up script has finished making the venv."""
        return (self.path() / self.marker).exists() and self.python().exists()

    def version(self, dist: str) -> str | None:
        """A distribution's version in the venv (the main environment may have none), from
        package metadata, without running the venv's python."""
        for site in self.path().glob("lib/python*/site-packages"):
            found = next(iter(metadata.distributions(name=dist, path=[str(site)])), None)
            if found is not None:
                return found.version
        return None
