"""The suite's groups, one module each, loaded by name only when run."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datapipe.suite.runner import Group


def load_group(name: str) -> Group:
    """The group `name` ("images", "recipe", "text", "convert", "gpu", "handoff", "hf_train",
    "mixture", "patches", "scale")."""
    return importlib.import_module(f"datapipe.suite.groups.{name}").GROUP
