"""The convert group's photos as people already hold them, and how each peer converts them:
WebDataset tars (the photos' own JPEG bytes as `jpg`, the label as `cls`, PIECES shards) and
Hugging Face Parquet (an `image` struct of bytes and path, an int64 `label`, as
`datasets.Image()` writes it). datapipe reads either as SRC; LitData's users give optimize()
the files and a function yielding each file's samples; WebDataset's read the tars with its
own pipeline and write with its ShardWriter."""

from __future__ import annotations

import json
import math
from pathlib import Path

from datapipe.suite.fixtures import PIECES, list_photos
from datapipe.suite.isolated.reencode import (
    parquet_row_groups,
    parquet_samples,
    plain_transform,
    tar_samples,
)
from datapipe.suite.runner import Record

SHARD_BYTES = 256 << 20
PARQUET_FILES = 4
# What `datasets` writes into a Parquet file's schema, so that it loads with its features.
HF_FEATURES = {"info": {"features": {"image": {"_type": "Image"},
                                     "label": {"dtype": "int64", "_type": "Value"}}}}


# ---------------------------------------------------------------- the forms (outside timing)


def make_tars(src: Path, out: Path, workers: int) -> None:
    import webdataset as wds

    items = list_photos(src)
    out.mkdir(parents=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxcount=math.ceil(len(items) / PIECES),
                         verbose=0) as sink:
        for index, (path, label) in enumerate(items):
            sink.write({"__key__": f"{index:08d}", "jpg": Path(path).read_bytes(),
                        "cls": label})


def make_parquet(src: Path, out: Path, workers: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    items = list_photos(src)
    out.mkdir(parents=True)
    per_file = math.ceil(len(items) / PARQUET_FILES)
    schema = pa.schema([("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("label", pa.int64())],
                       metadata={"huggingface": json.dumps(HF_FEATURES)})
    for index in range(PARQUET_FILES):
        part = items[index * per_file:(index + 1) * per_file]
        images = [{"bytes": Path(p).read_bytes(), "path": Path(p).name} for p, _ in part]
        table = pa.table({"image": images, "label": [label for _, label in part]}, schema)
        pq.write_table(table, out / f"train-{index:05d}-of-{PARQUET_FILES:05d}.parquet",
                       row_group_size=100)


# ---------------------------------------------------------------- what a peer's user writes


def litdata_tars(src: Path, out: Path, workers: int) -> Record:
    import litdata

    tars = sorted(map(str, src.glob("*.tar")))
    litdata.optimize(fn=tar_samples, inputs=tars, output_dir=str(out), num_workers=workers,
                     chunk_bytes=SHARD_BYTES)
    return {"items": count_litdata(out)}


def litdata_parquet(src: Path, out: Path, workers: int) -> Record:
    import litdata

    litdata.optimize(fn=parquet_samples, inputs=parquet_row_groups(src), output_dir=str(out),
                     num_workers=workers, chunk_bytes=SHARD_BYTES)
    return {"items": count_litdata(out)}


def count_litdata(out: Path) -> int:
    """Samples in an optimize()d folder, from its index."""
    index = json.loads((out / "index.json").read_text())
    return sum(chunk["chunk_size"] for chunk in index["chunks"])


def webdataset_tars(src: Path, out: Path, workers: int) -> Record:
    """WebDataset's own way: its pipeline over the tars in a DataLoader's workers (whole tars
    per worker), its ShardWriter in this process."""
    import webdataset as wds

    tars = sorted(map(str, src.glob("*.tar")))
    dataset = (wds.WebDataset(tars, shardshuffle=False, nodesplitter=wds.split_by_node)
               .to_tuple("jpg", "cls").map(lambda s: plain_transform(s[0], int(s[1]))))
    out.mkdir(parents=True)
    count = 0
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=SHARD_BYTES, verbose=0) as sink:
        for sample in wds.WebLoader(dataset, batch_size=None, num_workers=workers):
            sink.write({"__key__": f"{count:08d}", "jpg": sample["image"],
                        "cls": sample["label"]})
            count += 1
    return {"items": count}
