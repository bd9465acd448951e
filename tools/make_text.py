"""Write an English-like text corpus, one document per line, with a skewed length mix.

    python tools/make_text.py OUT.txt [--documents 5000] [--seed 0]

Document lengths are log-normal (a few words to a few thousand), like web text; words are drawn
from a Zipf-like distribution over a small vocabulary. Same arguments, same bytes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from "
         "at which but have an they you were her she there been one all we their has would when "
         "if so no out up into do can more also time new some could these two may first then "
         "any like my now over such our man me even most made after only well years data model "
         "training batch loader shard token image memory device worker queue").split()


def make_text(out: Path, documents: int = 5000, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()
    lengths = rng.lognormal(mean=3.5, sigma=1.1, size=documents).clip(3, 4000).astype(int)
    with open(out, "w") as f:
        for n in lengths:
            words = rng.choice(len(WORDS), size=n, p=weights)
            f.write(" ".join(WORDS[i] for i in words).capitalize() + ".\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.documents < 1:
        parser.error(f"--documents must be >= 1, got {args.documents}")
    make_text(args.out, args.documents, args.seed)
    print(f"wrote {args.documents:,} documents to {args.out} "
          f"({args.out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
