"""Start-up and memory against corpus size: TokenLoader (packed) over 10^5 to 10^8 tiny
documents and Loader over 10^5 to 10^7 tiny images (scale_peers), as rank 0 of 1 and rank 0
of 8, each loader also mixed 0.7 : 0.3 with a second source (rank 0 of 8), and a nanoGPT
memmap sampler (no plan at all) as the floor. Every corpus size is a fresh process per run:
construct, first batch, private memory then, and the first batch after load_state_dict of a
mid-epoch state. The report judges the goals of plans that do not grow with the corpus, and
extrapolates each row to 10^9 on its measured slope.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import build_once, warm_page_cache
from datapipe.suite.groups import scale_peers as sp
from datapipe.suite.groups import scale_report as sr
from datapipe.suite.machine import wait_for_quiet
from datapipe.suite.options import Options
from datapipe.suite.report import Panel
from datapipe.suite.runner import (
    CHILD_FAILURES,
    Group,
    GroupResult,
    Outcome,
    Peer,
    Record,
    fresh_dir,
    one_line,
    run_in_child,
)

VERSION = 1  # of the generated corpora: bump when they change, so cached ones are remade
SMOKE_SIZES = (10**3, 10**4)
IMAGES_UP_TO = 10**7


def row(name: str, label: str, run: Any, ours: bool = True, **settings: Any) -> Peer:
    return Peer(name, label, functools.partial(run, **settings), ("torch",), ours=ours,
                reference=not ours, tag=name.split("-")[0])


class ScaleGroup(Group):
    name, title, report = "scale", "Start-up and memory against corpus size", "scale"
    job_type = sp.Job
    peers = (
        row("tokens-w1", "datapipe TokenLoader (packed), rank 0 of 1", sp.run_tokens,
            world_size=1),
        row("tokens-r0of8", "datapipe TokenLoader (packed), rank 0 of 8", sp.run_tokens,
            world_size=8),
        row("tokens-mix", "datapipe TokenLoader (packed), a mixture, rank 0 of 8", sp.run_tokens,
            world_size=8),
        row("tokens-memmap", "nanoGPT memmap sampler (no plan)", sp.run_memmap, ours=False),
        row("images-w1", f"datapipe Loader (RandomResizedCrop {sp.CROP} + flip), rank 0 of 1",
            sp.run_images, world_size=1),
        row("images-r0of8", f"datapipe Loader (RandomResizedCrop {sp.CROP} + flip), rank 0 "
            "of 8", sp.run_images, world_size=8),
        row("images-mix", "datapipe Loader, a mixture, rank 0 of 8", sp.run_images,
            world_size=8),
    )

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """Each corpus a row still in the running reads, made once under DATA, its length
        index or scalar maps built (as a first run leaves them) and its files page-cached."""
        from datapipe.format.dataset import Dataset
        from datapipe.text.index import document_lengths

        tokens = corpus_sizes(opts)
        sizes = {"tokens": tokens, "images": [n for n in tokens if n <= IMAGES_UP_TO]}
        goals = {part: sizes[part][-1] if opts.smoke else size
                 for part, size in sr.GOAL_SIZE.items()}
        meta: dict[str, Any] = {"sizes": sizes, "goal_sizes": goals, "corpora": {}, "workers": 2,
                                "max_tokens": 256 if opts.smoke else 16384,
                                "batch": 16 if opts.smoke else 256, "repeats": opts.repeats}
        for part, write in (("tokens", sp.write_tokens), ("images", sp.write_images)):
            if not any(outcomes[p.name].status == "ok" for p in self.peers if p.tag == part):
                continue
            for n in sizes[part]:
                out = build_once(opts.data / "scale" / f"{part}-v{VERSION}-{n}",
                                 f"writing {n:,} {sr.UNITS[part]} ...",
                                 functools.partial(write, count=n))
                with Dataset(out / "dataset") as ds:
                    if part == "tokens":
                        document_lengths(ds)
                    else:
                        ds.scalar_map("label")  # and the other scalar columns, mapped
                warm_page_cache(sorted(out.rglob("*")))
                meta["corpora"].setdefault(part, {})[str(n)] = str(out)
        for part, write in (("tokens", sp.write_tokens), ("images", sp.write_images)):
            if outcomes[f"{part}-mix"].status != "ok":
                continue
            n = sizes[part][0]  # a second source as large as the smallest corpus
            second = build_once(opts.data / "scale" / f"{part}-v{VERSION}-second-{n}",
                                f"writing {n:,} {sr.UNITS[part]} (a second source) ...",
                                functools.partial(write, count=n))
            warm_page_cache(sorted(second.rglob("*")))
            meta.setdefault("mix_with", {})[part] = str(second / "dataset")
        return meta

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Any:
        """One job per corpus size: the sweep a run of `peer` goes through."""
        name = peer.name.removesuffix("-before")
        floor, corpora = name.endswith("memmap"), meta["corpora"][peer.tag]
        return [sp.Job(str(Path(corpora[str(n)]) / ("train.bin" if floor else "dataset")), n,
                       meta["workers"], meta["max_tokens"], meta["batch"],
                       mix_with=meta["mix_with"][peer.tag] if name.endswith("-mix") else None)
                for n in meta["sizes"][peer.tag]]

    def attempt(self, peer: Peer, job: Any, run_dir: Path, opts: Options) -> Record:
        """Every size in a fresh process of its own, smallest first; a size that fails ends
        the sweep (a larger one would fail too) and is kept as its error."""
        sizes: dict[str, Record] = {}
        for index, one in enumerate(job):
            if index:
                wait_for_quiet(opts.settle)
            try:
                run = run_in_child(self.name, peer, one, fresh_dir(run_dir / str(one.samples)))
            except CHILD_FAILURES as exc:
                run = {"error": one_line(exc)}
            if "error" in run and not sizes:
                return run
            sizes[str(one.samples)] = run
            if "error" in run:
                break
        return {"sizes": sizes, "others_cores": max(r.get("others_cores", 0.0)
                                                    for r in sizes.values())}

    def progress(self, peer: Peer, run: Record) -> str:
        return "; ".join(f"{sr.short(int(n))}: " + (r["error"] if "error" in r else
                         f"first batch {r['first_batch_s']:.2f} s, resume {r['resume_s']:.2f} "
                         f"s, {sr.memory(r):,.0f} MB") for n, r in run["sizes"].items())

    def after(self, opts: Options, meta: dict[str, Any], outcomes: dict[str, Outcome]) -> None:
        from datapipe.suite.machine import describe

        result = GroupResult(self.name, describe(), meta, outcomes, self.all_peers(opts))
        opts.out.mkdir(parents=True, exist_ok=True)
        meta["charts"] = {part: name for part in sr.UNITS if sr.draw(
            result, part, opts.out / (name := f"scale-{part}-sizes.png"))}

    def panels(self, result: GroupResult) -> list[Panel]:
        return sr.panels(result)

    def details(self, result: GroupResult) -> list[str]:
        return sr.details(result)


GROUP = ScaleGroup()


def corpus_sizes(opts: Options) -> list[int]:
    """The token corpora's sizes: 10^5 up to --scale-max, or SMOKE_SIZES (images: those up to
    IMAGES_UP_TO)."""
    if opts.smoke:
        return list(SMOKE_SIZES)
    return [10**k for k in range(5, 10) if 10**k <= opts.scale_max]
