"""Sizes written the way people write them: '256MB', '1.5G', '4096' (powers of 1024)."""

from __future__ import annotations

from datapipe.errors import ArgumentError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "T": 1 << 40, "TB": 1 << 40}


def format_size(n: float) -> str:
    """Bytes as people read them: '512 B', '46.0 MB', '2.3 TB' (powers of 1024, as below)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def parse_size(text: str | int, what: str, high: int, high_text: str) -> int:
    """Bytes in `text`; `what` names the setting in the error (e.g. '--shard-size')."""
    s = str(text).strip().upper()
    number = s.rstrip("KMGTB")
    try:
        value = float(number) * _UNITS[s[len(number):]]
    except (ValueError, KeyError):
        raise ArgumentError(f"{what}: cannot read {text!r} as a size (e.g. 256MB)") from None
    if not 1 <= value <= high:
        raise ArgumentError(f"{what}: {text!r} is out of range (1 byte to {high_text})")
    return int(value)
