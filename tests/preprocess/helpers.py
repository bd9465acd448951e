"""Shared by the converter tests."""

from __future__ import annotations

import os
import shutil


def unprivileged() -> list[str] | None:
    """A command prefix under which file permissions apply (root ignores them, unless its
    capabilities to do so are dropped), or None when there is no such prefix here."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
