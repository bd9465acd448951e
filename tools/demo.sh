#!/usr/bin/env bash
# The main job end to end on a generated sample: photos and text -> shards -> loaders ->
# training steps under the profiler. Everything lands in demo-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DP=.venv/bin/datapipe
OUT=demo-out
mkdir -p "$OUT"

step() { printf '\n== %s\n' "$*"; }

step "1. A sample of 300 photos (crops of real photos shipped in PyPI wheels)"
[ -d "$OUT/photos" ] || $PY tools/make_photos.py "$OUT/photos" --count 300 --classes 5

step "2. Convert images: decode, orient, resize to 256, re-encode, Arrow shards"
$DP convert images "$OUT/photos" "$OUT/images" --shard-size 8MB --overwrite
$DP inspect "$OUT/images"
$DP verify "$OUT/images"

step "3. Loader throughput: RandomResizedCrop(224) + flip, uint8 batches of 64"
$DP bench "$OUT/images" --batch-size 64 --epochs 2 --ceiling

step "4. Train a small CNN for one epoch under the profiler"
$DP profile --out "$OUT/profile-images" -- $PY examples/train_images.py "$OUT/images" \
  --epochs 1 --batch-size 64

step "5. Text: tokenize 3,000 documents with the byte tokenizer, then inspect"
$PY tools/make_text.py "$OUT/corpus.txt" --documents 3000
$DP convert text "$OUT/corpus.txt" "$OUT/tokens" --tokenizer bytes --append-eos --overwrite
$DP inspect "$OUT/tokens"

step "6. Train a tiny causal LM on packed, padding-free batches"
$PY examples/train_text.py "$OUT/tokens" --steps 20 --max-tokens 2048

step "Done. Shards, profile report (.txt/.json), trace (.trace.json) and page (.html) in $OUT/"
