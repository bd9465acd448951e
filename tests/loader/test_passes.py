"""The DataLoader contract frameworks rely on: every iter() is a new, complete pass (except the
first after load_state_dict), epochs move on by themselves unless set_epoch names one, one pass
at a time (a clear error, never a hang, for a left-behind iterator or a second thread), and
`fields` for tuple-shaped loops."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import datapipe as dp
from datapipe.errors import ArgumentError
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import indices_of, same_batch

CROP = dp.image.CenterCrop(16)
THREAD_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 samples over several shards."""
    root = tmp_path_factory.mktemp("passes")
    src = make_image_folder(root / "src", classes=3, per_class=8, size=(40, 32))
    convert("images", src, root / "out", "--short-side", "24", "--shard-size", "6KB")
    return root / "out"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("passes-text")
    lines = [" ".join(["word"] * (3 + (i * 7) % 40)) for i in range(120)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "a.txt", root / "out", "--tokenizer", "bytes", "--append-eos")
    return root / "out"


def loader(shards: Path, workers: int = 0, **kwargs: object) -> dp.Loader:
    return dp.Loader(shards, batch_size=5, num_workers=workers, transform=CROP, seed=1,
                     **kwargs)


def epoch_indices(shards: Path, epoch: int, **kwargs: object) -> list[int]:
    with loader(shards, **kwargs) as fresh:
        fresh.set_epoch(epoch)
        return indices_of(list(fresh))


# --- every iter() a new pass --------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pass_left_early_is_followed_by_a_complete_new_one(shards: Path, workers: int) -> None:
    """Lightning's sanity check takes 2 batches and breaks; the next pass is a whole epoch."""
    with loader(shards, workers, shuffle=False) as val:
        for _ in range(2):
            iter(val)  # Lightning checks that a loader is iterable: that begins nothing
        it = iter(val)
        head = [next(it), next(it)]
        assert indices_of(head) == list(range(10))
        assert indices_of(list(val)) == list(range(24)), "the next pass starts at the start"
        assert indices_of(list(val)) == list(range(24))


def test_abandoned_and_finished_passes_both_move_to_the_next_epoch(shards: Path) -> None:
    with loader(shards) as train:
        first = iter(train)
        head = [next(first) for _ in range(2)]  # limit_train_batches=2
        second = [next(iter(train)) for _ in range(1)]
        third = list(train)
    assert indices_of(head) == epoch_indices(shards, 0)[:10]
    assert indices_of(second) == epoch_indices(shards, 1)[:5]
    assert indices_of(third) == epoch_indices(shards, 2)
    assert train.epoch == 2


def test_set_epoch_names_the_epoch_of_a_whole_new_pass(shards: Path) -> None:
    with loader(shards) as train:
        train.set_epoch(3)
        it = iter(train)
        next(it)
        train.set_epoch(3)  # as Lightning does at every epoch start, even the same one
        assert indices_of(list(train)) == epoch_indices(shards, 3)


def test_first_pass_after_load_continues_and_the_one_after_is_new(shards: Path) -> None:
    with loader(shards) as first:
        it = iter(first)
        head = [next(it) for _ in range(2)]
        state = first.state_dict()
    with loader(shards) as second:
        second.load_state_dict(state)
        iter(second)  # a check, not a pass: the restored position stays
        second.set_epoch(0)  # the saved epoch: still a continuation
        it = iter(second)
        tail = [next(it)]  # and left early, as limit_train_batches does
        after = list(second)
    assert indices_of(head + tail) == epoch_indices(shards, 0)[:15]
    assert indices_of(after) == epoch_indices(shards, 1), "then a whole new epoch"


def test_sampler_set_epoch_is_where_lightning_looks(shards: Path) -> None:
    from lightning.fabric.utilities.data import _set_sampler_epoch
    from lightning.pytorch.utilities.data import _is_dataloader_shuffled

    with loader(shards) as train:
        _set_sampler_epoch(train, 4)
        assert train.epoch == 4
        assert indices_of(list(train)) == epoch_indices(shards, 4)
        assert not _is_dataloader_shuffled(train)  # reads batch_sampler once it sees a sampler
        assert not hasattr(train, "dataset"), "Lightning would try to re-instantiate us"


def test_len_is_the_pass_that_iter_begins(corpus: Path) -> None:
    """Token batches per epoch vary; len() is that of the pass under way or about to begin."""
    def fresh(epoch: int) -> int:
        with dp.TokenLoader(corpus, max_tokens=256) as tokens:
            tokens.set_epoch(epoch)
            return len(tokens)

    lengths = [fresh(e) for e in range(8)]
    e = next(e for e in range(7) if lengths[e] != lengths[e + 1])
    with dp.TokenLoader(corpus, max_tokens=256) as tokens:
        tokens.set_epoch(e)
        it = iter(tokens)
        next(it)
        assert len(tokens) == lengths[e], "the pass under way"
        for _ in range(lengths[e] - 1):
            next(it)
        assert len(tokens) == lengths[e + 1], "all its batches out (Lightning asks no more)"
        assert sum(1 for _ in tokens) == lengths[e + 1]


# --- one pass at a time -------------------------------------------------------------------


@pytest.mark.parametrize("move_on", ["iter", "set_epoch", "load_state_dict"])
def test_a_left_behind_iterator_says_so(shards: Path, move_on: str) -> None:
    with loader(shards) as train:
        old = iter(train)
        next(old)
        state = train.state_dict()
        if move_on == "iter":
            new = iter(train)
            next(new)
        elif move_on == "set_epoch":
            train.set_epoch(1)
        else:
            train.load_state_dict(state)
        with pytest.raises(ArgumentError, match="this iterator was left behind"):
            next(old)


def _in_thread(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_second_thread_is_refused_while_the_first_fetches(shards: Path) -> None:
    """Thread A is inside next() (held at a known point) when thread B asks for a batch."""
    inside, tried = threading.Event(), threading.Event()
    results: dict[str, object] = {}
    with loader(shards) as shared:
        assemble = shared._assemble

        def held_assemble(*args: object) -> object:
            if threading.current_thread().name == "A" and not inside.is_set():
                inside.set()
                tried.wait(THREAD_TIMEOUT_S)
            return assemble(*args)

        shared._assemble = held_assemble  # type: ignore[method-assign]

        def a() -> None:
            results["a"] = indices_of(list(shared))

        def b() -> None:
            inside.wait(THREAD_TIMEOUT_S)
            try:
                next(iter(shared))
            except ArgumentError as exc:
                results["b"] = str(exc)
            finally:
                tried.set()

        thread_a = threading.Thread(target=a, name="A", daemon=True)
        thread_a.start()
        thread_b = _in_thread(b)
        for thread in (thread_a, thread_b):
            thread.join(THREAD_TIMEOUT_S)
            assert not thread.is_alive(), "a thread hung"
    assert "another thread is fetching a batch" in str(results.get("b"))
    assert results.get("a") == epoch_indices(shards, 0), "thread A's pass is untouched"


def _race(shared: dp.Loader) -> list[object]:
    """Two threads iterate `shared` at once; what each got: indices, or the error."""
    outcomes: list[object] = []
    start = threading.Barrier(2)

    def run() -> None:
        start.wait(THREAD_TIMEOUT_S)
        try:
            outcomes.append(sorted(indices_of(list(shared))))
        except ArgumentError as exc:
            outcomes.append(exc)

    threads = [_in_thread(run) for _ in range(2)]
    for thread in threads:
        thread.join(THREAD_TIMEOUT_S)
        assert not thread.is_alive(), "a thread hung"
    return outcomes


def test_two_threads_racing_over_one_loader_never_hang(shards: Path) -> None:
    """However they interleave, one thread gets a clear error and the other a whole epoch."""
    with loader(shards, workers=2) as shared:
        for _ in range(5):
            outcomes = _race(shared)
            errors = [o for o in outcomes if isinstance(o, ArgumentError)]
            passes = [o for o in outcomes if not isinstance(o, ArgumentError)]
            assert all(p == list(range(24)) for p in passes), "a pass that ends is complete"
            assert len(errors) <= 1 and passes


# --- one thread per iterator --------------------------------------------------------------


def _next_in_thread(it: object) -> object:
    """next(it) in a thread of its own: the batch, or the exception it raised."""
    outcome: list[object] = []

    def take() -> None:
        try:
            outcome.append(next(it))  # type: ignore[call-overload]
        except Exception as exc:  # the outcome under test
            outcome.append(exc)

    thread = _in_thread(take)
    thread.join(THREAD_TIMEOUT_S)
    assert not thread.is_alive(), "a thread hung"
    return outcome[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_second_thread_advancing_a_shared_iterator_is_refused(shards: Path,
                                                                workers: int) -> None:
    """Before, it silently took every other batch (or, overlapping, got a bare ValueError)."""
    with loader(shards, workers) as shared:
        it = iter(shared)
        head = [next(it)]
        refused = _next_in_thread(it)
        assert isinstance(refused, ArgumentError), refused
        assert "from a thread other than the one that took its first batch" in str(refused)
        assert "\n" not in str(refused)
        rest = list(it)
    assert indices_of(head + rest) == epoch_indices(shards, 0), "the owner's pass is untouched"


def test_threads_racing_over_one_iterator_get_a_clear_error_not_a_generator_error(
        shards: Path) -> None:
    outcomes: list[object] = []
    start = threading.Barrier(2)
    with loader(shards, workers=2) as shared:
        it = iter(shared)

        def run() -> None:
            start.wait(THREAD_TIMEOUT_S)
            try:
                outcomes.append(indices_of(list(it)))
            except Exception as exc:  # the outcome under test
                outcomes.append(exc)

        threads = [_in_thread(run) for _ in range(2)]
        for thread in threads:
            thread.join(THREAD_TIMEOUT_S)
            assert not thread.is_alive(), "a thread hung"
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], ArgumentError), outcomes
    assert [o for o in outcomes if not isinstance(o, Exception)] == [epoch_indices(shards, 0)]


def test_an_iterator_may_be_made_in_one_thread_and_used_in_another(shards: Path) -> None:
    with loader(shards) as train:
        it = iter(train)
        first = _next_in_thread(it)
        assert not isinstance(first, Exception), first
        assert indices_of([first]) == epoch_indices(shards, 0)[:5]


# --- fields -------------------------------------------------------------------------------


def test_fields_yield_tuples_of_the_batch_values(shards: Path) -> None:
    with loader(shards) as as_dicts, loader(shards, fields=("image", "label")) as as_tuples:
        for batch, (images, target) in zip(as_dicts, as_tuples, strict=True):
            assert same_batch({"image": images, "label": target},
                              {"image": batch["image"], "label": batch["label"]})
    with loader(shards, fields=["index"]) as single:
        assert all(isinstance(b, tuple) and len(b) == 1 for b in single)


@pytest.mark.parametrize(("fields", "message"), [
    ("image", "fields must be a tuple of batch keys"),
    ((), "fields must be a tuple of batch keys"),
    (("image", 3), "fields must be a tuple of batch keys"),
    (("image", "target"), "no 'target' in this loader's batches"),
])
def test_bad_fields_are_refused(shards: Path, fields: object, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        loader(shards, fields=fields)


def test_token_fields_follow_the_layout(corpus: Path) -> None:
    from datapipe.loader.token_loader import BATCH_KEYS, COMMON_KEYS

    with dp.TokenLoader(corpus, max_tokens=256, fields=("input_ids", "labels")) as tokens:
        ids, labels = next(iter(tokens))
        assert ids.shape == labels.shape
    for layout, options in (("packed", {}), ("padded", {}), ("fixed", {"seq_len": 64})):
        with dp.TokenLoader(corpus, max_tokens=256, layout=layout, **options) as tokens:
            keys = set(next(iter(tokens)))
        assert keys == set(BATCH_KEYS[layout] + COMMON_KEYS), layout
    with pytest.raises(ArgumentError, match="no 'attention_mask'"):
        dp.TokenLoader(corpus, max_tokens=256, layout="packed", fields=("attention_mask",))
