"""Padding efficiency at one sequence length, after the text group's rounds: TokenLoader's rows
of exactly `SEQ_LEN` (layout="fixed", best-fit-decreasing) against TRL's `pack_dataset` on the
same documents (the `datasets` copy). Counted over a whole epoch, not timed: real tokens over
tokens computed (rows x SEQ_LEN), and the tokens each packer keeps (TRL's "bfd" truncates
documents longer than a row; "bfd_split" and datapipe split them)."""

from __future__ import annotations

from typing import Any

from datapipe.suite.report import Entry, Panel

SEQ_LEN = 4096
GOAL_EFFICIENCY = 0.99
TRL_STRATEGIES = ("bfd_split", "bfd")


def datapipe_fixed(dataset: str) -> dict[str, Any]:
    import datapipe

    real = computed = 0
    # shuffle=True: best-fit-decreasing over windows of documents (shuffle=False fills rows in
    # document order, next-fit, as a user who wants that order asks for)
    with datapipe.TokenLoader(dataset, max_tokens=SEQ_LEN, layout="fixed", seq_len=SEQ_LEN,
                              shuffle=True, seed=0, num_workers=0) as loader:
        for batch in loader:
            real += batch["num_real_tokens"]
            computed += batch["input_ids"].numel()
    return {"real_tokens": real, "computed_tokens": computed}


def trl_packed(hf: str, strategy: str) -> dict[str, Any]:
    import datasets
    import pyarrow.compute as pc
    from trl import pack_dataset

    datasets.disable_progress_bars()
    documents = datasets.load_from_disk(hf).select_columns(["input_ids"])
    packed = pack_dataset(documents, SEQ_LEN, strategy=strategy)
    real = int(pc.sum(pc.list_value_length(packed.data.column("input_ids"))).as_py())
    return {"real_tokens": real, "computed_tokens": len(packed) * SEQ_LEN}


def measure(meta: dict[str, Any]) -> dict[str, Any]:
    """Each packer's counts, or why it could not run."""
    rows: dict[str, Any] = {"datapipe-fixed": datapipe_fixed(meta["datapipe"])}
    for strategy in TRL_STRATEGIES:
        name = f"trl-{strategy}"
        if not meta.get("hf"):
            rows[name] = {"error": "skipped: no `datasets` copy (its peers did not run)"}
            continue
        try:
            rows[name] = trl_packed(meta["hf"], strategy)
        except ImportError as exc:
            rows[name] = {"error": f"not installed ({exc.name}: pip install trl)"}
    for name, row in rows.items():
        if "error" not in row:
            row["efficiency"] = row["real_tokens"] / max(1, row["computed_tokens"])
            print(f"packing at {SEQ_LEN:,}: {name} efficiency {row['efficiency']:.4f}, "
                  f"{row['real_tokens']:,} of {meta['tokens']:,} tokens kept", flush=True)
    return rows


LABELS = {"datapipe-fixed": f"datapipe TokenLoader (fixed, seq_len {SEQ_LEN:,})",
          "trl-bfd_split": "TRL pack_dataset (bfd_split)", "trl-bfd": "TRL pack_dataset (bfd)"}


def panel(packing: dict[str, Any], tokens: int) -> list[Panel]:
    if not packing:
        return []
    entries = [Entry(name, LABELS[name], row.get("error", "ok"),
                     [row["efficiency"]] if "efficiency" in row else [], name == "datapipe-fixed")
               for name, row in packing.items()]
    return [Panel("text-packing", f"Padding efficiency, rows of {SEQ_LEN:,} tokens", "efficiency",
                  entries, "datapipe-fixed", "trl-bfd_split",
                  job=f"the suite's corpus ({tokens:,} tokens), one epoch; real tokens / "
                  "rows x row length.")]


def goals(packing: dict[str, Any]) -> list[tuple[str, str, bool]]:
    ours = packing.get("datapipe-fixed", {}).get("efficiency")
    if ours is None:
        return []
    rows = [(f"fixed layout padding efficiency at {SEQ_LEN:,} ≥ {GOAL_EFFICIENCY}",
             f"{ours:.4f}", ours >= GOAL_EFFICIENCY)]
    for strategy in TRL_STRATEGIES:
        theirs = packing.get(f"trl-{strategy}", {}).get("efficiency")
        if theirs is not None:
            rows.append((f"fixed layout efficiency ≥ TRL {strategy}'s",
                         f"{ours:.4f} vs {theirs:.4f}", ours >= theirs))
    return rows
