"""How a Loader hands out captions: the batch keys contrastive trainers read, and a preset per
model family.

Beside `image`, a batch gets `input_ids` (B, L) int64, `attention_mask` (B, L) int64 (1 on a
caption's ids, 0 on padding) and `caption_index` (B,) int64, which of a sample's captions was
drawn. L is `context_length` with `padding="max_length"`, or the batch's longest caption (at
most `context_length`) with `padding="longest"`. A caption longer than L is cut keeping its
last id when that is the tokenizer's end of text (the token CLIP pools at).

Presets, as each stack's tokenizer makes its batches:
- "openclip": `open_clip.tokenize`: 77 ids, padded with 0.
- "clip": transformers' CLIPTokenizer with `padding="max_length"`: 77 ids, padded with its
  pad token (the dataset's tokenizer's pad id).
- "siglip": SigLIP's `padding="max_length", max_length=64`, padded with the tokenizer's pad id.
A setting given beside a preset that fixes it to another value is refused, naming both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datapipe.errors import ArgumentError, DataError
from datapipe.format.captions import CaptionInfo

PADDING = ("max_length", "longest")
TOKENIZER_PAD = "tokenizer"  # a preset's pad id: the one the dataset's tokenizer saves
PRESETS: dict[str, dict[str, Any]] = {
    "openclip": {"context_length": 77, "padding": "max_length", "pad_id": 0},
    "clip": {"context_length": 77, "padding": "max_length", "pad_id": TOKENIZER_PAD},
    "siglip": {"context_length": 64, "padding": "max_length", "pad_id": TOKENIZER_PAD},
}
CAPTION_FIELDS = ("input_ids", "attention_mask", "caption_index")


@dataclass(frozen=True)
class CaptionLayout:
    """What the workers need to collate captions (small and picklable)."""

    context_length: int
    padding: str
    pad_id: int
    eos_id: int | None

    def width(self, longest: int) -> int:
        """A batch's L, given its longest drawn caption."""
        if self.padding == "max_length":
            return self.context_length
        return max(1, min(longest, self.context_length))


@dataclass(frozen=True)
class Captions:
    """The `captions=` argument of Loader: a preset, and any of its settings. None: the
    preset's, else `padding="longest"` up to the dataset's longest caption, padded with its
    tokenizer's pad id (0 where it has none)."""

    preset: str | None = None
    context_length: int | None = None
    padding: str | None = None
    pad_id: int | None = None

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise ArgumentError(f"captions preset must be one of {tuple(PRESETS)}, got "
                                f"{self.preset!r}")
        for name in ("context_length", "pad_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < (1 if name == "context_length" else 0)):
                raise ArgumentError(f"captions {name}: a whole number >= "
                                    f"{1 if name == 'context_length' else 0}, got {value!r}")
        if self.padding is not None and self.padding not in PADDING:
            raise ArgumentError(f"captions padding must be one of {PADDING}, got "
                                f"{self.padding!r}")
        chosen = PRESETS.get(self.preset or "", {})
        for name, value in (("context_length", self.context_length),
                            ("padding", self.padding), ("pad_id", self.pad_id)):
            if value is not None and name in chosen and value != chosen[name] and \
                    chosen[name] != TOKENIZER_PAD:
                raise ArgumentError(f"captions preset {self.preset!r} sets {name}="
                                    f"{chosen[name]!r}, but {name}={value!r} was given; drop "
                                    "one of them")

    def layout(self, info: CaptionInfo, where: str) -> CaptionLayout:
        """The settings made concrete for a dataset's captions."""
        chosen = PRESETS.get(self.preset or "", {})
        padding = self.padding or chosen.get("padding", "longest")
        context = self.context_length or chosen.get("context_length") or max(info.longest, 1)
        pad_id = self.pad_id if self.pad_id is not None else chosen.get("pad_id", TOKENIZER_PAD)
        if pad_id == TOKENIZER_PAD:
            pad_id = info.pad_id
            if pad_id is None and self.preset is not None:
                raise ArgumentError(f"captions preset {self.preset!r} pads with the tokenizer's "
                                    f"pad id, and {where}'s tokenizer saves none: give "
                                    f"Captions(preset={self.preset!r}, pad_id=...)")
        return CaptionLayout(context, padding, 0 if pad_id is None else pad_id, info.eos_id)


def as_captions(value: Any) -> Captions | bool | None:
    """The `captions=` argument checked: a preset name, a Captions, True, False or None."""
    if value is None or isinstance(value, bool | Captions):
        return value
    if isinstance(value, str):
        return Captions(preset=value)
    raise ArgumentError(f"captions must be a preset name {tuple(PRESETS)}, a dp.Captions, True "
                        f"or False, got {value!r}")


def dataset_captions(infos: Sequence[CaptionInfo | None], names: Sequence[str],
                     asked: Captions | bool | None) -> CaptionLayout | None:
    """The layout for one dataset or a mixture's (None: no captions handed out). Captions asked
    of a dataset without them, or a mixture whose datasets were tokenized differently, are
    refused naming the dataset."""
    if asked is False or (asked is None and any(i is None for i in infos)):
        return None
    settings = asked if isinstance(asked, Captions) else Captions()
    for info, name in zip(infos, names, strict=True):
        if info is None:
            raise ArgumentError(f"captions: {name} has no captions (convert it with "
                                "--tokenizer, see docs/captions.md)")
    first = infos[0]
    for info, name in zip(infos[1:], names[1:], strict=True):
        if info.tokenizer_hash != first.tokenizer_hash:
            raise DataError(f"captions: {name} was tokenized with another tokenizer than "
                            f"{names[0]} ({info.tokenizer_hash} vs {first.tokenizer_hash}); a "
                            "batch's ids must share one vocabulary")
    longest = max(info.longest for info in infos)
    return settings.layout(CaptionInfo(first.pad_id, first.eos_id, longest,
                                       first.tokenizer_hash), names[0])
