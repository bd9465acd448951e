"""What every converter's sources share: refusing what cannot be read as a file."""

from __future__ import annotations

from pathlib import Path

from datapipe.errors import DataError


def require_regular_file(path: Path) -> None:
    """Refuse a FIFO or a device (reading one could block forever) and a dangling link."""
    if not path.is_file():
        raise DataError(f"{path}: not a regular file (or a link to none)")
