"""A loader's `path` when it names several datasets (a list, or a dict name -> path): the
sources of a mixture, and the checks that they can be mixed at all. Datasets of different
kinds, image schemas or tokenizers cannot share a batch: that is one `ArgumentError` naming
both paths and what differs, when the loader is made."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.format.concat import SOURCE_FIELD
from datapipe.format.manifest import Manifest
from datapipe.format.sources import Location, resolve_location

MIXTURE_FIELD = SOURCE_FIELD  # what a mixture adds to every batch: the dataset of each sample


@dataclass(frozen=True)
class Sources:
    """The datasets of a mixture, in order, and the names `weights` and reports use: the
    dict's keys, or "0", "1", ... for a list."""

    names: tuple[str, ...]
    locations: tuple[Location, ...]
    named: bool  # given as a dict (weights may then be a dict too)

    def __len__(self) -> int:
        return len(self.names)


def is_mixture(path: Any) -> bool:
    """Several datasets: a list, tuple or dict (a str or Path is one dataset)."""
    return isinstance(path, Mapping) or (isinstance(path, Sequence)
                                         and not isinstance(path, str | bytes))


def parse_sources(path: Any, cache_dir: str | Path | None,
                  cache_size: int | str | None) -> Sources:
    """The sources of `path` (a list of paths/URLs, or a dict name -> path/URL)."""
    if isinstance(path, Mapping):
        names = list(path)
        for name in names:
            if not isinstance(name, str) or not name:
                raise ArgumentError(f"path: a mixture's names must be non-empty strings, got "
                                    f"{name!r}")
        where = [path[n] for n in names]
    else:
        where = list(path)
        names = [str(i) for i in range(len(where))]
    if not where:
        raise ArgumentError("path: an empty list of datasets; give at least one")
    for name, entry in zip(names, where, strict=True):
        if not isinstance(entry, str | Path) or not str(entry):
            raise ArgumentError(f"path[{name!r}] must be a path or URL, got {entry!r}")
    locations = tuple(resolve_location(p, cache_dir, cache_size) for p in where)
    seen: dict[str, str] = {}
    for name, location in zip(names, locations, strict=True):
        if str(location) in seen:
            raise ArgumentError(f"path: {location} is given twice (as {seen[str(location)]!r} "
                                f"and {name!r}); give it once with a larger weight")
        seen[str(location)] = name
    return Sources(tuple(names), locations, isinstance(path, Mapping))


def check_mixable(manifests: Sequence[Manifest], sources: Sources, kind: str,
                  relabelled: bool = False) -> None:
    """Every source of `kind`, and each like the first in what a batch mixes (not in their
    classes where the loader renumbers labels: `relabelled`, see class_labels.py)."""
    for manifest, location in zip(manifests, sources.locations, strict=True):
        if manifest.kind != kind:
            raise ArgumentError(f"path: {location} is a {manifest.kind} dataset and "
                                f"{sources.locations[0]} {'an' if kind == 'images' else 'a'} "
                                f"{kind} one; a mixture's datasets are of one kind")
    first = manifests[0]
    for manifest, location in zip(manifests[1:], sources.locations[1:], strict=True):
        difference = _difference(first, manifest, kind, relabelled)
        if difference:
            raise ArgumentError(f"path: {sources.locations[0]} and {location} cannot be mixed: "
                                f"{difference}")


# What to do about two lists of classes (class_labels.py renumbers the labels by name).
RELABEL_HINT = ("; pass classes='union' (their classes together, sorted) or classes=[...] (your "
                "list), and each dataset's labels are renumbered to it")


def _difference(a: Manifest, b: Manifest, kind: str, relabelled: bool) -> str | None:
    """What differs between two manifests that a batch of both could not hold, or None."""
    if kind == "images":
        encodings = a.settings.get("encoding", "jpeg"), b.settings.get("encoding", "jpeg")
        if encodings[0] != encodings[1]:
            return f"image encoding {encodings[0]!r} vs {encodings[1]!r}"
        if not relabelled and a.classes != b.classes:  # the whole lists, not what is shown
            hint = RELABEL_HINT if a.classes is not None and b.classes is not None else ""
            return f"classes (labels would mean different things) {_classes(a, b)}{hint}"
        checks = [(f"column {c!r}", _type(a, c), _type(b, c))
                  for c in ("image", "label", "height", "width")]
    else:
        tokenizer_a, tokenizer_b = a.tokenizer or {}, b.tokenizer or {}
        checks = [("tokenizer (the vocabularies differ)",
                   (tokenizer_a.get("name"), tokenizer_a.get("hash")),
                   (tokenizer_b.get("name"), tokenizer_b.get("hash"))),
                  ("column 'tokens'", _type(a, "tokens"), _type(b, "tokens")),
                  ("column 'loss_mask' (supervised and plain text)", _type(a, "loss_mask"),
                   _type(b, "loss_mask"))]
    for what, x, y in checks:
        if x != y:
            return f"{what} {x!r} vs {y!r}"
    return None


def _type(manifest: Manifest, column: str) -> str | None:
    return next((c.type for c in manifest.columns if c.name == column), None)


def _classes(a: Manifest, b: Manifest) -> str:
    """Two lists of classes, shown by their count and first names (and their first difference
    where those agree)."""
    shown = [_first_classes(m.classes) for m in (a, b)]
    text = f"{shown[0]!r} vs {shown[1]!r}"
    if shown[0] == shown[1] and a.classes and b.classes:
        at = next(i for i, (x, y) in enumerate(zip(a.classes, b.classes, strict=True))
                  if x != y)
        text += f" (label {at}: {a.classes[at]!r} vs {b.classes[at]!r})"
    return text


def _first_classes(classes: tuple[str, ...] | None) -> str:
    return "none" if classes is None else f"{len(classes)}: {', '.join(classes[:3])}" + (
        ", ..." if len(classes) > 3 else "")


def shared_extra_columns(manifests: Sequence[Manifest], sources: Sources,
                         wanted: tuple[str, ...] | None,
                         standard: Iterable[str]) -> tuple[str, ...]:
    """The extra columns of a mixture's batches: those asked for, each in every source (else
    an error naming the source without it); by default the ones all sources have."""
    standard = set(standard)
    if wanted is None:
        common = [c for c in manifests[0].column_names if c not in standard
                  and all(c in m.column_names for m in manifests[1:])]
        if MIXTURE_FIELD in common:
            warnings.warn(f"{sources.locations[0]}: the datasets' column {MIXTURE_FIELD!r} is "
                          "left out of the mixture's batches, whose 'source' is the dataset of "
                          "each sample (name the columns to keep with extra_columns=)",
                          RuntimeWarning, stacklevel=4)
        return tuple(c for c in common if c != MIXTURE_FIELD
                     and len({_type(m, c) for m in manifests}) == 1)
    if MIXTURE_FIELD in wanted:
        raise ArgumentError(f"extra_columns: a mixture's batches hold {MIXTURE_FIELD!r} (the "
                            "dataset of each sample); the datasets' own column of that name "
                            "cannot be handed out beside it")
    for name in wanted:
        for manifest, location in zip(manifests, sources.locations, strict=True):
            if name not in manifest.column_names:
                raise ArgumentError(f"extra_columns: {location} has no column {name!r} (a "
                                    "mixture's extra columns must be in every dataset)")
        types = {_type(m, name) for m in manifests}
        if len(types) > 1:
            raise ArgumentError(f"extra_columns: column {name!r} has different types in the "
                                f"mixture's datasets ({', '.join(sorted(map(str, types)))})")
    return tuple(wanted)
