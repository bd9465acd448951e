"""WebDataset tars and Hugging Face-layout Parquet files of small photos, for the converter
tests: written with tarfile and pyarrow as those tools write them."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tests.imagegen import jpeg_bytes, noise_image

Sample = dict[str, Any]  # "__key__" and extension -> bytes, str or int (as text)


def photo(seed: int, width: int = 64, height: int = 48) -> bytes:
    return jpeg_bytes(noise_image(width + seed % 7 * 4, height, seed))


def photo_samples(count: int, first: int = 0, **size: int) -> list[Sample]:
    """Samples as a WebDataset writer makes them: a jpg, a cls and a txt member each."""
    return [{"__key__": f"{n:06d}", "jpg": photo(n, **size), "cls": n % 3,
             "txt": f"photo {n}"} for n in range(first, first + count)]


def write_tar(path: Path, samples: list[Sample]) -> Path:
    """The members of each sample in order, named KEY.EXTENSION, as webdataset's TarWriter
    writes them (with tarfile, end-of-archive marker included)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for sample in samples:
            for extension, value in sample.items():
                if extension != "__key__":
                    add_member(tar, f"{sample['__key__']}.{extension}", value)
    return path


def add_member(tar: tarfile.TarFile, name: str, value: Any) -> None:
    data = value if isinstance(value, bytes) else str(value).encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_tars(folder: Path, count: int, per_tar: int, **size: int) -> list[Path]:
    return [write_tar(folder / f"shard-{n:06d}.tar", photo_samples(per_tar, n * per_tar, **size))
            for n in range(count)]


HF_FEATURES = {"info": {"features": {
    "image": {"_type": "Image"},
    "label": {"names": ["cat", "dog", "fish"], "_type": "ClassLabel"},
    "caption": {"dtype": "string", "_type": "Value"}}}}


def write_hf_parquet(path: Path, images: list[bytes | None], row_group_size: int = 100,
                     image_column: str = "image", **columns: list[Any]) -> Path:
    """A Parquet file laid out as Hugging Face `datasets` writes an image dataset: the image a
    struct of bytes and path, a ClassLabel's names in the schema's metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    structs = [None if data is None else {"bytes": data, "path": f"{n}.jpg"}
               for n, data in enumerate(images)]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({image_column: pa.array(structs, image_type), **columns})
    table = table.replace_schema_metadata({"huggingface": json.dumps(HF_FEATURES)})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def photo_rows(count: int, first: int = 0, **size: int) -> dict[str, list[Any]]:
    """Images, labels and captions of `count` rows."""
    return {"images": [photo(n, **size) for n in range(first, first + count)],
            "label": [n % 3 for n in range(first, first + count)],
            "caption": [f"photo {n}" for n in range(first, first + count)]}
