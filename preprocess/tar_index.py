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
import re
from dataclasses import dataclass, field
from typing import Any

from preprocess.captions import NotText
from preprocess.file_access import InputFile, open_forward
from preprocess.tar_headers import Header, TarDamage, read_headers

# The image extensions a sample's image is taken from by default, in order of preference.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "jfif", "bmp", "gif", "tif", "tiff", "ppm",
                    "pgm", "pbm", "pnm")
LABEL_FIELDS = ("cls", "json:label")
MAX_TEXT_BYTES = 64 << 10  # a member this small may be text for an extra column
# Extensions never read as text: pixels, arrays, audio and video, compressed data.
_BINARY = frozenset({*IMAGE_EXTENSIONS, "npy", "npz", "pt", "pth", "pkl", "pickle", "mp3", "mp4",
                     "wav", "flac", "ogg", "webm", "avi", "gz", "bz2", "xz", "zst"})
_META = re.compile(r"(^|/)__[^/]*__($|/)")  # WebDataset's own entries (__meta__), not samples


@dataclass(frozen=True)
class TarSettings:
    """What every worker listing tars holds: the tars, and which members are what."""

    files: tuple[InputFile, ...]
    image_fields: tuple[str, ...] = IMAGE_EXTENSIONS  # compared without case (`.JPEG`)
    label_fields: tuple[str, ...] = LABEL_FIELDS  # an extension, or json:KEY
    caption_fields: tuple[str, ...] = ()  # likewise; () when no caption is read


@dataclass
class TarSample:
    """The members of one key, in tar order."""

    key: str
    at: int  # byte offset of its first member's header
    extensions: list[str] = field(default_factory=list)
    image: tuple[int, int] | None = None  # (offset, size) of the image member's data
    image_rank: int = 0  # of its extension among the image fields: the lowest is taken
    label: Any = None  # the first label field it has; None: none
    caption: Any = None  # the first caption field it has (NotText: one that is not text)
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
    if not file.size:
        return [TarProblem("", 0, "an empty file, not a tar; nothing in it converted")]
    with open_forward(file) as raw:
        return _Listing(settings, file, raw).entries()


class _Listing:
    def __init__(self, settings: TarSettings, file: InputFile, raw: Any) -> None:
        self.settings, self.file, self.raw = settings, file, raw
        self.images = tuple(e.lower() for e in settings.image_fields)
        self.read_json = any(f.startswith("json:")
                             for f in settings.label_fields + settings.caption_fields)
        self.result: list[TarEntry] = []
        self.sample: TarSample | None = None
        self.strays: list[TarProblem] = []  # members without a key, inside the open sample

    def entries(self) -> list[TarEntry]:
        try:
            for header in read_headers(self.raw, self.file.size):
                self._add(header)
        except TarDamage as damage:
            self._damaged(damage)
        self._close_sample()
        return self.result

    def _add(self, header: Header) -> None:
        if header.is_dir or _META.search(header.name):
            return
        key, extension = split_name(header.name)
        if key is None:  # listed after the sample around it, which goes on, as WebDataset's
            self.strays.append(TarProblem(header.name, header.offset, "not a sample's member: "
                                          "its name is not KEY.EXTENSION"))
            if self.sample is None:
                self._close_sample()
            return
        self._sample_of(key, header.offset)
        self._add_member(self.sample, header, extension)

    def _sample_of(self, key: str, offset: int) -> None:
        if self.sample is None or self.sample.key != key:
            self._close_sample()
            self.sample = TarSample(key, offset)

    def _add_member(self, sample: TarSample, header: Header, extension: str) -> None:
        if extension in sample.extensions:
            sample.problem = sample.problem or f"two {extension} members"
        sample.extensions.append(extension)
        if not header.is_file:
            sample.texts[extension] = None
        elif extension.lower() in self.images:
            rank = self.images.index(extension.lower())
            if sample.image is None or rank < sample.image_rank:
                sample.image, sample.image_rank = (header.offset_data, header.size), rank
        elif extension == "json":  # read for a label alone: a document is no scalar column
            sample.texts[extension] = self._text(header, MAX_TEXT_BYTES * 16) \
                if self.read_json else None
        elif extension.rpartition(".")[2].lower() not in _BINARY:
            sample.texts[extension] = self._text(header, MAX_TEXT_BYTES)
        else:
            sample.texts[extension] = None

    def _text(self, header: Header, limit: int) -> str | None:
        if header.size > limit:
            return None
        self.raw.seek(header.offset_data)
        try:
            text = self.raw.read(header.size).decode("utf-8")
        except UnicodeDecodeError:
            return None
        return None if "\x00" in text else text.strip()

    def _close_sample(self) -> None:
        sample, self.sample = self.sample, None
        if sample is not None:
            sample.label = self._label(sample)
            sample.caption = self._caption(sample)
            self.result.append(sample)
        self.result.extend(self.strays)
        self.strays = []

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

    def _caption(self, sample: TarSample) -> Any:
        """The first caption field the sample has: a member's text, or a json key's value
        (a string, a list of them, or whatever the json holds there)."""
        for name in self.settings.caption_fields:
            extension, _, key = name.partition(":")
            if extension not in sample.texts:
                continue
            text = sample.texts[extension]
            if text is None:
                return NotText(f"its {extension} member is binary, not UTF-8, or over "
                               f"{MAX_TEXT_BYTES >> 10} KB")
            if not key:
                return text
            try:
                record = json.loads(text)
            except ValueError:
                return NotText(f"its {extension} member is not JSON")
            if isinstance(record, dict) and key in record:
                return record[key]
        return None

    def _damaged(self, damage: TarDamage) -> None:
        """The tar ends here: a member cut short makes its sample the reject (a member without
        a key, or a header, the tar)."""
        listed = self.result or self.sample is not None or self.strays
        problem = TarProblem("", damage.at, f"{damage}; " + (
            "the samples before it are converted, none after" if listed else
            "nothing in it converted"))
        key = split_name(damage.member)[0] if damage.member else None
        if key is None:
            self._close_sample()
            self.result.append(problem)
            return
        self._sample_of(key, damage.at)
        self.sample.problem = problem.reason


def split_name(name: str) -> tuple[str | None, str]:
    """(key, extension) of a member, as WebDataset splits it; key None when it has no key
    (a name starting with '.') or no extension."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    if not stem or not dot or not extension:
        return None, ""
    return (f"{folder}/{stem}" if folder else stem), extension
