"""What every converter's sources share: refusing what cannot be read as a file, reading text as
people save it, and telling a datapipe output (which is never an input) from the data beside it.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from pathlib import Path

from datapipe.errors import DataError
from datapipe.format.manifest import FORMAT_NAME, MANIFEST_NAME
from datapipe.format.output_lock import LOCK_NAME
from preprocess.resume import JOURNAL_NAME

TEXT_ENCODING = "utf-8-sig"  # UTF-8, with the byte-order mark Excel and Notepad put first
_LINE_END = re.compile(r"\r\n|\r|\n")


def require_regular_file(path: Path) -> None:
    """Refuse a FIFO or a device (reading one could block forever) and a dangling link."""
    if not path.is_file():
        raise DataError(f"{path}: not a regular file (or a link to none)")


def strip_bom(text: str) -> str:
    return text.removeprefix(codecs.BOM_UTF8.decode())


def split_lines(text: str) -> list[str]:
    """Lines as a file reader numbers them: ended by \\n, \\r\\n or \\r only. str.splitlines
    also ends a line at U+2028, U+0085 and the like, which JSON strings may hold as they are:
    it would cut such a record in two and number every later line wrongly."""
    lines = text.split("\n") if "\r" not in text else _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()  # the end of the last line, not a line
    return lines


def split_jsonl_lines(text: str) -> list[str]:
    """JSON Lines' lines: ended by \\n only, a \\r before it dropped. A bare \\r is JSON
    whitespace, which a record may hold between its values (a pretty-printer's CR line ends):
    ending a line there cut a valid record in two rejects."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the end of the last line, not a line
    return [line.removesuffix("\r") for line in lines] if "\r" in text else lines


def is_datapipe_output(folder: Path) -> bool:
    """Whether `folder` holds a datapipe dataset (a manifest of our format) or a conversion
    in progress: its files are shards, not inputs."""
    # os.path.exists: False for a folder that cannot be searched, which the scan then lists
    # (and rejects) as it would any; Path.exists raises there.
    if os.path.exists(folder / JOURNAL_NAME) or os.path.exists(folder / LOCK_NAME):
        return True
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME
