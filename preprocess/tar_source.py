"""WebDataset tars as a source of images: the workers' listings (tar_index.py), in tar order,
made into the inputs of a conversion, with labels and extra columns typed as the CSV/JSONL
lists type theirs.

Every sample that cannot be converted is an input with its reason, named TAR:KEY: a sample
without an image member or without a label (when others have one), a key whose members are
not adjacent, a key split across two tars (both parts, each naming the other: WebDataset would
have read two half samples), a member cut short by the end of the tar.
"""

from __future__ import annotations

import itertools
from typing import Any

from preprocess.engine_base import Engine
from preprocess.file_access import InputFile, describe_files
from preprocess.image_columns import check_extra_names, sparse_labels, typed_column
from preprocess.image_inputs import ImageItem, ImageSource, SourceOptions, TarMember, alternatives
from preprocess.tar_index import (
    IMAGE_EXTENSIONS,
    LABEL_FIELDS,
    TarEntry,
    TarProblem,
    TarSample,
    TarSettings,
    list_tar,
)

Listing = list[TarEntry]


def list_tar_images(files: tuple[InputFile, ...], options: SourceOptions,
                    engine: Engine | None, root: str | None) -> ImageSource:
    """The samples of `files` in order, listed by the engine's workers (here without one)."""
    settings = TarSettings(files, _fields(options.image_field, IMAGE_EXTENSIONS),
                           _fields(options.label_field, LABEL_FIELDS),
                           _fields(options.caption_field, ()))
    tasks = range(len(files))
    listings = list(engine.map_ordered(list_tar, settings, tasks) if engine is not None else
                    (list_tar(settings, number) for number in tasks))
    _mark_repeated_keys(files, listings)
    samples = [entry for listing in listings for entry in listing
               if isinstance(entry, TarSample)]
    labels, classes = sparse_labels([s.label for s in samples], "no label: it has none of "
                                    f"{', '.join(settings.label_fields)}")
    columns = _extra_columns(files, samples,
                             settings.label_fields + settings.caption_fields)
    items, index = [], 0  # index: among the samples, which labels and extras are aligned with
    for number, listing in enumerate(listings):
        for entry in listing:
            if isinstance(entry, TarProblem):
                where = f"{files[number].name}:{entry.where}" if entry.where else \
                    files[number].name
                items.append(ImageItem(None, where, -1, problem=entry.reason))
                continue
            extras = tuple(values[index] for _, values in columns.values())
            items.append(_sample_item(files[number], number, entry, labels[index], extras))
            index += 1
    return ImageSource(tuple(items), classes,
                       tuple((name, kind) for name, (kind, _) in columns.items()), files, root)


def _fields(given: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    return default if given is None else alternatives(given)


def _mark_repeated_keys(files: tuple[InputFile, ...], listings: list[Listing]) -> None:
    """A key twice in one tar, or ending one tar and starting the next: no sample for sure."""
    for file, listing in zip(files, listings, strict=True):
        first: dict[str, TarSample] = {}
        for sample in _samples(listing):
            earlier = first.setdefault(sample.key, sample)
            if earlier is not sample:
                reason = (f"key {sample.key} appears twice in {file.name} (members at bytes "
                          f"{earlier.at} and {sample.at}): a sample's members must be adjacent")
                _reject(earlier, reason)
                _reject(sample, reason)
    for (a, ending), (b, starting) in itertools.pairwise(zip(files, listings, strict=True)):
        last, first_sample = _samples(ending)[-1:], _samples(starting)[:1]
        if last and first_sample and last[0].key == first_sample[0].key:
            reason = (f"key {last[0].key} is split across {a.name} (byte {last[0].at}) and "
                      f"{b.name} (byte {first_sample[0].at}): a sample's members must all be "
                      "in one tar; neither part is converted")
            _reject(last[0], reason)
            _reject(first_sample[0], reason)


def _samples(listing: Listing) -> list[TarSample]:
    return [entry for entry in listing if isinstance(entry, TarSample)]


def _reject(sample: TarSample, reason: str) -> None:
    if sample.problem is None:
        sample.problem = reason


def _extra_columns(files: tuple[InputFile, ...], samples: list[TarSample],
                   used_fields: tuple[str, ...]) -> dict[str, tuple[str, list[Any]]]:
    """Extension -> (column type, value of each sample): the extensions whose every member is
    short text (not the label's or caption's, not json), sorted by name."""
    used = {field.partition(":")[0] for field in used_fields} | {"json"}
    names: set[str] = set()
    not_text: set[str] = set()
    for sample in samples:
        for extension, text in sample.texts.items():
            (names if text is not None else not_text).add(extension)
    columns = sorted(names - not_text - used)
    check_extra_names(describe_files(files), columns, "member extension")
    return {name: typed_column([s.texts.get(name) for s in samples]) for name in columns}


def _sample_item(file: InputFile, number: int, sample: TarSample, label: Any,
                 extras: tuple[Any, ...]) -> ImageItem:
    problem = sample.problem
    if problem is None and sample.image is None:
        problem = f"no image member (its members: {', '.join(sample.extensions)})"
    if problem is None and not isinstance(label, int):
        problem = label or f"label {sample.label} is beyond the int64 range"
    return ImageItem(None, f"{file.name}:{sample.key}", label if isinstance(label, int) else -1,
                     extras, problem, TarMember(number, *sample.image) if sample.image else None,
                     sample.caption)
