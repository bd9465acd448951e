"""What the manifest says of a conversion's captions (`stats["captions"]`): how many, how many
were cut to --caption-max-tokens, and the longest, which bounds a loader's rows. A resumed run
counts the shards it keeps from their stored lengths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from datapipe.format.captions import CAPTION_LENGTHS
from datapipe.format.shard_formats import open_shard
from preprocess.output import OutputDirectory


class CaptionCounts:
    def __init__(self) -> None:
        self.captions = self.truncated = self.longest = 0
        self.kept_truncated: int | None = 0  # None: unknown (cut in a run this one resumes)

    @classmethod
    def of_kept_shards(cls, output: OutputDirectory) -> CaptionCounts:
        counts = cls()
        for shard in output.writer.shards[:output.resumed_shards]:
            reader = open_shard(output.out / shard.name, output.options.shard_format,
                                output.columns)
            try:
                counts.add([reader.payload(CAPTION_LENGTHS, row)
                            for row in range(reader.num_rows)], 0)
            finally:
                reader.close()
        if output.resumed_shards:
            counts.kept_truncated = None
        return counts

    def add(self, lengths: Sequence[np.ndarray], truncated: int) -> None:
        """One span's samples: each one's caption lengths."""
        self.captions += sum(len(part) for part in lengths)
        self.longest = max([self.longest, *(int(part.max()) for part in lengths if len(part))])
        self.truncated += truncated

    def stats(self) -> dict[str, int | None]:
        """`truncated` counts this run's cuts; a resumed run adds `truncated_before: null`
        (the run it resumes counted its own)."""
        stats: dict[str, int | None] = {"captions": self.captions, "truncated": self.truncated,
                                        "longest": self.longest}
        if self.kept_truncated is None:
            stats["truncated_before"] = None
        return stats
