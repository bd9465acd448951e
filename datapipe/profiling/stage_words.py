"""Stage names in plain words, for what a reader sees (the text report, the verdict, the page).

The JSON report, the trace and the code keep the short keys ("decode", "hand-off (main)"); a
reader who has not read the loader's source gets "decoding images" and "handing batches to the
training loop". A stage the loader reports under a name of the user's own (a `PerSample` step)
keeps that name.
"""

from __future__ import annotations

from datapipe.profiling.blame import MAIN

WORDS = {
    "read": "reading samples from the shards",
    "decode": "decoding images",
    "collate": "assembling batches",
    "captions": "padding captions into batches",
    "transform": "batch transforms",
    "pin": "copying batches into pinned memory",
    "copy": "copying batches to the GPU",
    "transfer": "copying batches to the GPU",
    "feed": "feeding batches to DALI",
    "hand-off": "handing batches to the training loop",
    "loader": "inside the loader, outside any timed stage",
    "device input": "the GPU waiting for its input (copy or transforms)",
}
# Stages that say where they ran already; the others get "(workers)" or "(training process)".
PLACED = {"hand-off", "loader", "device input"}


def stage_words(key: str, *, placed: bool = False) -> str:
    """A stage key as words: 'decode' -> 'decoding images', 'collate (main)' -> 'assembling
    batches (training process)'. `placed`: also say where a worker-side stage ran."""
    name = key.removesuffix(MAIN)
    words = WORDS.get(name, name)
    if name in PLACED:
        return words
    if key.endswith(MAIN):
        return f"{words} (training process)"
    return f"{words} (workers)" if placed else words
