"""One WebDataset tar listed by a conversion worker: its members grouped into samples as
WebDataset groups them, with where each sample's image lies and the text of its small members.

The process writing the shards never reads a tar: it gets these listings, in tar order, and the
workers later read each image's bytes from the range listed here. A member's key is its path up
to the first dot of its file name, the rest is its extension (`a/n01.seg.png`: key `a/n01`,
extension `seg.png`); consecutive members with one key are one sample. Only headers and small
members are read: an image member is stepped over (a seek here; by URL the tar is streamed once).
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from dataclasses import dataclass, field
from typing import Any

from preprocess.file_access import InputFile, open_forward

# The image extensions a sample's image is taken from by default, in order of preference.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "jfif", "bmp", "gif", "tif", "tiff", "ppm",
                    "pgm", "pbm", "pnm")
LABEL_FIELDS = ("cls", "json:label")
MAX_TEXT_BYTES = 64 << 10  # a member this small may be text for an extra column
# Extensions never read as text: pixels, arrays, audio and video, compressed data.
_BINARY = frozenset({*IMAGE_EXTENSIONS, "npy", "npz", "pt", "pth", "pkl", "pickle", "mp3", "mp4",
                     "wav", "flac", "ogg", "webm", "avi", "gz", "bz2", "xz", "zst"})
_META = re.compile(r"(^|/)__[^/]*__($|/)")  # WebDataset's own entries (__meta__), not samples
_BLOCK = tarfile.BLOCKSIZE


@dataclass(frozen=True)
class TarSettings:
    """What every worker listing tars holds: the tars, and which members are what."""

    files: tuple[InputFile, ...]
    image_fields: tuple[str, ...] = IMAGE_EXTENSIONS  # compared without case (`.JPEG`)
    label_fields: tuple[str, ...] = LABEL_FIELDS  # an extension, or json:KEY


@dataclass
class TarSample:
    """The members of one key, in tar order."""

    key: str
    at: int  # byte offset of its first member's header
    extensions: list[str] = field(default_factory=list)
    image: tuple[int, int] | None = None  # (offset, size) of the image member's data
    image_rank: int = 0  # of its extension among the image fields: the lowest is taken
    label: Any = None  # the first label field it has; None: none
    texts: dict[str, str | None] = field(default_factory=dict)  # extension -> text (None: not)
    problem: str | None = None


@dataclass(frozen=True)
class TarProblem:
    """Bytes of the tar that belong to no sample: a member without a key, a cut, a bad header."""

    where: str  # the member's name, or "" for the tar itself
    at: int
    reason: str


TarEntry = TarSample | TarProblem


def list_tar(settings: TarSettings, number: int) -> list[TarEntry]:
    """One engine task: the samples (and problems) of tar `number`, in tar order."""
    file = settings.files[number]
    with open_forward(file) as raw:
        tracked = _LastRead(raw)
        try:
            archive = tarfile.TarFile(fileobj=tracked, mode="r")
        except tarfile.ReadError as exc:
            what = "an empty file" if not file.size else f"not a tar archive ({exc})"
            return [TarProblem("", 0, f"{what}; nothing in it converted")]
        return _Listing(settings, file, archive, tracked).entries()


class _LastRead:
    """The file tarfile reads, remembering the last block it read: whether the archive stopped
    at its end-of-archive marker or at a cut is told by that block."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.last = b""

    def read(self, size: int = -1) -> bytes:
        self.last = self.raw.read(size)
        return self.last

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()


class _Listing:
    def __init__(self, settings: TarSettings, file: InputFile, archive: tarfile.TarFile,
                 tracked: _LastRead) -> None:
        self.settings, self.file, self.archive, self.tracked = settings, file, archive, tracked
        self.images = tuple(e.lower() for e in settings.image_fields)
        self.read_json = any(f.startswith("json:") for f in settings.label_fields)
        self.result: list[TarEntry] = []
        self.sample: TarSample | None = None

    def entries(self) -> list[TarEntry]:
        try:
            for info in self.archive:
                if not self._add(info):
                    break
            else:
                self._check_end()
        except tarfile.ReadError as exc:  # a header that is cut or garbled
            self._close_sample()
            at = self.archive.offset
            self.result.append(self._problem(at, self._missing_header(at) if
                                             at + _BLOCK > self.file.size else
                                             f"unreadable at byte {at} ({exc})"))
        self._close_sample()
        return self.result

    def _add(self, info: tarfile.TarInfo) -> bool:
        """Take one member into its sample; False at a member cut short (the end of the list)."""
        if info.isdir() or _META.search(info.name):
            return True
        key, extension = split_name(info.name)
        if key is not None and (self.sample is None or self.sample.key != key):
            self._close_sample()
            self.sample = TarSample(key, info.offset)
        if info.offset_data + info.size > self.file.size:
            self._member_cut(info, key)
            return False
        if key is None:  # listed, and the sample around it (if any) goes on, as WebDataset's
            self.result.append(TarProblem(info.name, info.offset, "not a sample's member: its "
                                          "name is not KEY.EXTENSION"))
        else:
            self._add_member(self.sample, info, extension)
        return True

    def _add_member(self, sample: TarSample, info: tarfile.TarInfo, extension: str) -> None:
        if extension in sample.extensions:
            sample.problem = sample.problem or f"two {extension} members"
        sample.extensions.append(extension)
        if not info.isreg():
            sample.texts[extension] = None
        elif extension.lower() in self.images:
            rank = self.images.index(extension.lower())
            if sample.image is None or rank < sample.image_rank:
                sample.image, sample.image_rank = (info.offset_data, info.size), rank
        elif extension == "json":  # read for a label alone: a document is no scalar column
            sample.texts[extension] = self._text(info, MAX_TEXT_BYTES * 16) \
                if self.read_json else None
        elif extension.rpartition(".")[2].lower() not in _BINARY:
            sample.texts[extension] = self._text(info, MAX_TEXT_BYTES)
        else:
            sample.texts[extension] = None

    def _text(self, info: tarfile.TarInfo, limit: int) -> str | None:
        if info.size > limit:
            return None
        data = self.archive.extractfile(info).read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return None if "\x00" in text else text.strip()

    def _close_sample(self) -> None:
        sample, self.sample = self.sample, None
        if sample is None:
            return
        sample.label = self._label(sample)
        self.result.append(sample)

    def _label(self, sample: TarSample) -> Any:
        for name in self.settings.label_fields:
            extension, _, key = name.partition(":")
            text = sample.texts.get(extension)
            if text is None:
                continue
            if not key:
                return text
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get(key) is not None:
                return record[key]
        return None

    def _member_cut(self, info: tarfile.TarInfo, key: str | None) -> None:
        """The member's sample (or, without a key, the tar) is the reject the cut makes."""
        cut = self._problem(self.file.size, f"cut short at byte {self.file.size}: member "
                            f"{info.name} needs {info.size} bytes from byte {info.offset_data}")
        if key is not None:
            self.sample.problem = cut.reason
        else:
            self._close_sample()
            self.result.append(cut)

    def _check_end(self) -> None:
        """tarfile ends quietly at a cut between members and at a garbled header: only the
        end-of-archive marker (a block of zeros) ends a whole tar."""
        block, at, size = self.tracked.last, self.archive.offset, self.file.size
        if len(block) == _BLOCK and not block.strip(b"\0"):
            return
        self._close_sample()
        if len(block) == _BLOCK:
            reason = f"corrupt at byte {at}: not a tar header"
        elif block:
            reason = self._missing_header(at)
        else:
            reason = f"cut short at byte {size}: it ends without the end-of-archive marker"
        self.result.append(self._problem(at, reason))

    def _missing_header(self, at: int) -> str:
        return (f"cut short at byte {self.file.size}: the member header due at byte {at} is "
                "missing or incomplete")

    @staticmethod
    def _problem(at: int, what: str) -> TarProblem:
        return TarProblem("", at, f"{what}; the samples before it are converted, none after")


def split_name(name: str) -> tuple[str | None, str]:
    """(key, extension) of a member, as WebDataset splits it; key None when it has no key
    (a name starting with '.') or no extension."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    if not stem or not dot or not extension:
        return None, ""
    return (f"{folder}/{stem}" if folder else stem), extension
