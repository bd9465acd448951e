"""decode="dali": NVIDIA DALI decodes, crops, resizes and flips each batch (nvJPEG on a GPU).

Crop boxes and flips are planned exactly as on the CPU path (`plan_crops` with `batch_rng`) and
fed to DALI next to the encoded bytes, so a batch's geometry is a function of (seed, epoch,
batch): the same boxes as decode="cpu", repeatable, and unchanged by a resume mid-epoch. DALI's
own random operators (`image_random_crop`, `coin_flip`) would give none of that: their state
depends on how many batches the pipeline has run. DALI decodes only the box (ROI decode).

A batch's other fields (labels, ids, extra columns, and a captioned dataset's drawn captions,
padded as the workers pad them on the CPU path) are read with its inputs by the thread that
prepares them, and wait there for the batch's images: the thread that iterates the loader only
drives DALI.

DALI cannot say which sample of a batch it failed on, and an error invalidates its pipeline. A
failed batch is therefore rebuilt on the CPU path, which names the bad sample (on_error="raise")
or skips it (on_error="skip"); DALI resumes with a fresh pipeline from the next batch.

On a GPU the batch leaves DALI without a host synchronisation: the outputs are bound to the
loader's copy stream (`outputs(cuda_stream=...)`, which makes that stream wait for them instead
of the host), and copied there into memory torch owns (see `DaliProducer._copy_out` for why).

DALI is optional and imported only here, when a `DaliProducer` is made.
"""

from __future__ import annotations

import inspect
import queue
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import torch

from datapipe.errors import ArgumentError
from datapipe.format.concat import batch_ids
from datapipe.image.transforms import plan_crops
from datapipe.loader.caption_batches import caption_fields, captions_to_columns
from datapipe.loader.device import CopyLeases
from datapipe.loader.image_batches import ImageBatchBuilder, ImageBatchSpec, batch_rng
from datapipe.loader.workers import BatchTask
from datapipe.sampling.order import EpochPlan

_MISSING = "decode='dali' needs NVIDIA DALI: pip install nvidia-dali-cuda130"
MIN_VERSION = (1, 44)  # the dynamic executor, whose outputs can be handed out without a copy
PREFETCH_DEPTH = 2


def _import_dali() -> Any:
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn
        import nvidia.dali.tensors
        import nvidia.dali.types  # noqa: F401
    except ImportError:
        raise ArgumentError(_MISSING) from None
    version = tuple(int(p) for p in dali.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_VERSION:
        raise ArgumentError(f"decode='dali' needs NVIDIA DALI >= 1.44, found {dali.__version__}:"
                            " pip install -U nvidia-dali-cuda130")
    return dali


class _DaliFailure(Exception):
    """DALI failed on the batch whose outputs were asked for."""


_END = object()  # what the preparing thread hands over after a run's last batch


class _Prepared(NamedTuple):
    """One batch made ready for DALI by the preparing thread."""

    batch_no: int
    meta: dict[str, Any]  # the batch's fields but its images
    views: list[np.ndarray]  # the encoded bytes, which DALI reads in place
    inputs: tuple[Any, ...]  # what the external source hands DALI


class _Feeder:
    """The pipeline's external source: per call, one batch of encoded bytes, crop boxes and
    flips. DALI calls it from `schedule_run`, up to PREFETCH_DEPTH batches ahead; the batch's
    other fields wait for its images in `meta_of`.

    A run's batches are prepared ahead by a thread of its own: per batch that is a view and a
    DALI tensor per sample, the batch's labels, columns and captions, Python work the thread
    that iterates the loader would otherwise do. DALI reads the arrays in place (`no_copy`), so
    they must stay unchanged until it is done with them, PREFETCH_DEPTH iterations later: the
    bytes are views of the read-only shard maps, and every array is kept for a few more calls
    than that."""

    def __init__(self, builder: ImageBatchBuilder, spec: ImageBatchSpec, tensors: Any,
                 dataset_lock: threading.Lock, pin_captions: bool = False) -> None:
        self.builder, self.spec, self.tensors = builder, spec, tensors  # nvidia.dali.tensors
        self.dataset_lock = dataset_lock  # the dataset opens shards lazily: one thread at a time
        self.pin_captions = pin_captions  # page-locked caption rows, for a copy to the GPU
        self.with_flip = spec.pipeline.flip is not None
        self._fed: deque[_Prepared] = deque(maxlen=PREFETCH_DEPTH + 2)
        self._metas: dict[int, dict[str, Any]] = {}  # batches DALI took, by number
        self._ready: queue.Queue[Any] = queue.Queue()
        self._halt = threading.Event()
        self._halt.set()  # no run yet: a call ends DALI's epoch
        self._thread: threading.Thread | None = None

    def start(self, plan: EpochPlan, epoch: int, first: int) -> None:
        self.stop()
        self._ready, self._halt = queue.Queue(maxsize=PREFETCH_DEPTH + 1), threading.Event()
        self._metas = {}
        self._thread = threading.Thread(
            target=self._prepare_run, name="datapipe-dali-feed", daemon=True,
            args=(plan, epoch, range(first, len(plan)), self._ready, self._halt))
        self._thread.start()

    def stop(self) -> None:
        """End the run: its preparing thread exits, and later calls end DALI's epoch."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __call__(self) -> tuple[Any, ...]:
        item = _END if self._halt.is_set() else self._ready.get()
        if item is _END:
            raise StopIteration  # ends DALI's epoch
        if isinstance(item, BaseException):
            raise item
        self._fed.append(item)
        self._metas[item.batch_no] = item.meta
        return item.inputs

    def meta_of(self, b: int) -> dict[str, Any]:
        """Batch b's fields but its images (DALI has taken its inputs)."""
        return self._metas.pop(b)

    def _prepare_run(self, plan: EpochPlan, epoch: int, numbers: range, ready: queue.Queue,
                     halt: threading.Event) -> None:
        for b in numbers:
            try:
                item = self._prepare(plan, epoch, b)
            except Exception as exc:  # raised where DALI asks for the batch
                item = exc
            if not _offer(ready, item, halt) or isinstance(item, Exception):
                return
        _offer(ready, _END, halt)

    def _prepare(self, plan: EpochPlan, epoch: int, b: int) -> _Prepared:
        """Batch b made ready: DALI's inputs, the bytes they view, the batch's other fields."""
        idx, is_pad = plan.batch(b)
        heights, widths = self.builder.heights, self.builder.widths
        boxes, flips = plan_crops(self.spec.pipeline, heights[idx], widths[idx],
                                  batch_rng(self.spec.seed, epoch, b))
        views = self.encoded(idx)
        # One batch object over the views: DALI takes it without a Python step per sample.
        encoded = self.tensors.TensorListCPU([self.tensors.TensorCPU(v) for v in views],
                                             contiguous=False)
        anchors = np.ascontiguousarray(boxes[:, :2], dtype=np.int32)  # (x0, y0): "WH" order
        shapes = np.ascontiguousarray(boxes[:, 2:], dtype=np.int32)  # (w, h)
        inputs = (encoded, anchors, shapes, flips.astype(np.int32))[:4 if self.with_flip else 3]
        return _Prepared(b, self._meta(epoch, idx, is_pad), views, inputs)

    def _meta(self, epoch: int, indices: np.ndarray, is_pad: np.ndarray) -> dict[str, Any]:
        """What `ImageBatchBuilder.build` returns when every sample decodes, the drawn captions
        (if any) among the columns as finished fields."""
        builder = self.builder
        meta: dict[str, Any] = {"count": len(indices), **batch_ids(builder.dataset, indices),
                                "label": builder.labels[indices], "is_padding": is_pad,
                                "skipped": []}
        with self.dataset_lock:
            captions: dict[str, Any] = {}
            if builder.captions is not None:
                shards, rows = builder.dataset.locate_many(indices)
                captions = caption_fields(builder.captions, epoch, indices, shards, rows,
                                          self.pin_captions)
            meta["columns"] = {**captions, **builder.extras.of(indices)}  # the CPU path's order
        return meta

    def encoded(self, idx: np.ndarray) -> list[np.ndarray]:
        """The samples' JPEG bytes: zero-copy views of the shards."""
        dataset = self.builder.dataset
        shards, rows = dataset.locate_many(idx)
        with self.dataset_lock:
            return [dataset.shard(int(k)).payload("image", int(r))
                    for k, r in zip(shards.tolist(), rows.tolist(), strict=True)]


def _offer(ready: queue.Queue, item: Any, halt: threading.Event) -> bool:
    """Put `item` once there is room; False if the run was stopped first."""
    while not halt.is_set():
        try:
            ready.put(item, timeout=0.05)
            return True
        except queue.Full:
            pass
    return False


def _graph(dali: Any, feeder: _Feeder, out_size: tuple[int, int], decoder: str) -> Any:
    fn, types = dali.fn, dali.types
    n = 4 if feeder.with_flip else 3
    inputs = fn.external_source(source=feeder, num_outputs=n, batch=True, no_copy=True,
                                dtype=[types.UINT8, types.INT32, types.INT32, types.INT32][:n],
                                ndim=[1, 1, 1, 0][:n])
    # Integer anchor/shape are absolute pixels. EXIF is ignored, as on the CPU path: boxes are
    # planned in stored pixels.
    images = fn.decoders.image_slice(inputs[0], inputs[1], inputs[2], device=decoder,
                                     axis_names="WH", output_type=types.RGB,
                                     adjust_orientation=False)
    # Linear with antialiasing is what PIL's BILINEAR does on the CPU path.
    images = fn.resize(images, size=list(out_size), interp_type=types.INTERP_LINEAR,
                       antialias=True)
    if feeder.with_flip:
        images = fn.flip(images, horizontal=inputs[3])
    return images


class DaliProducer:
    """Yields (metadata, uint8 N x H x W x 3 tensor) per batch, like `BatchProducer`.

    On CUDA the tensors are made on `stream` (the loader's copy stream, whose event the caller's
    stream waits for; if none is given, the device's current stream at creation)."""

    def __init__(self, spec: ImageBatchSpec, batch_size: int, num_workers: int,
                 device: torch.device, stream: Any = None) -> None:
        self._dali = _import_dali()
        self.spec, self.batch_size, self.device = spec, batch_size, device
        self.num_threads = max(1, num_workers)
        cuda = device.type == "cuda"
        self.stream = stream or (torch.cuda.current_stream(device) if cuda else None)
        # Where outputs are bound: our stream, where this DALI can (else the host waits).
        self.output_stream = self.stream if _takes_stream(self._dali.Pipeline.outputs) else None
        self.leases = CopyLeases()  # DALI outputs until their copies have completed
        self.builder = ImageBatchBuilder(spec)
        self.dataset_lock = threading.Lock()  # shared with the feeders' preparing threads
        if self.builder.encoding != "jpeg":
            raise ArgumentError(f"{spec.directory}: decode='dali' reads JPEG shards, this "
                                f"dataset stores {self.builder.encoding!r} pixels: use "
                                "decode='cpu' (it skips decoding)")
        # A built pipeline between epochs; built now so that a DALI setup problem shows here.
        self._idle: tuple[Any, _Feeder] | None = self._new_pipeline()

    def _new_pipeline(self) -> tuple[Any, _Feeder]:
        dali, cuda = self._dali, self.device.type == "cuda"
        feeder = _Feeder(self.builder, self.spec, dali.tensors, self.dataset_lock,
                         pin_captions=cuda)
        device_id = (self.device.index if self.device.index is not None
                     else torch.cuda.current_device()) if cuda else None
        # exec_dynamic: outputs stay valid after the next iteration (CPU outputs are handed out
        # without a copy, by DLPack) and can be bound to a CUDA stream instead of the host.
        # The graph is deterministic; the seed only pins DALI's state.
        pipe = dali.Pipeline(batch_size=self.batch_size, num_threads=self.num_threads,
                             device_id=device_id, seed=self.spec.seed % 2**31,
                             prefetch_queue_depth=PREFETCH_DEPTH, exec_dynamic=True)
        with pipe:
            pipe.set_outputs(_graph(dali, feeder, self.spec.out_size,
                                    "mixed" if cuda else "cpu"))
        pipe.build()
        return pipe, feeder

    def batches(self, plan: EpochPlan, epoch: int, start: int,
                upcoming: Any = None) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        """Yield (metadata, images) for batches start..len(plan)-1, in order. (`upcoming` is
        for the worker pool's cross-epoch prefetch; DALI prefetches inside its pipeline.)"""
        b = start
        while b < len(plan):
            # Each run owns its pipeline: one abandoned mid-epoch is dropped, not reused.
            pipe, feeder = self._idle or self._new_pipeline()
            self._idle = None
            try:
                for meta, images in self._run(pipe, feeder, plan, epoch, b):
                    yield meta, images
                    b += 1
            except _DaliFailure as failure:
                error = str(failure)
            else:
                self._idle = pipe, feeder
                return
            # The failed pipeline is discarded; the next loop builds a fresh one.
            yield self._on_cpu(plan, epoch, b, error)
            b += 1

    def _run(self, pipe: Any, feeder: _Feeder, plan: EpochPlan, epoch: int,
             start: int) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        feeder.start(plan, epoch, start)
        try:
            for b in range(start, len(plan)):
                started = time.perf_counter()
                self.leases.release_finished()
                try:
                    pipe.schedule_run()
                    (images,) = self._outputs(pipe)
                except RuntimeError as exc:
                    raise _DaliFailure(_reason(exc)) from exc
                tensor = self._to_torch(images)
                meta = feeder.meta_of(b)
                # Feeding and running DALI happen in the thread that iterates the loader.
                meta["main_stages"] = {"feed": time.perf_counter() - started}
                yield meta, tensor
            # Lets the source's StopIteration end DALI's epoch if it has not yet, so reset()
            # rewinds.
            pipe.schedule_run()
            pipe.reset()
        finally:  # finished, failed or abandoned: the preparing thread goes
            feeder.stop()

    def _outputs(self, pipe: Any) -> Any:
        """The next outputs. On CUDA they are bound to our stream: DALI makes the stream wait
        for them, where `outputs()` alone would block the host until the GPU is done."""
        if self.output_stream is not None:
            return pipe.outputs(cuda_stream=self.output_stream)
        return pipe.outputs()

    def _to_torch(self, images: Any) -> torch.Tensor:
        dense = images.as_tensor()  # every sample is H x W x 3: one N x H x W x 3 tensor
        if self.device.type == "cuda":
            return self._copy_out(images, dense)
        # CPU memory has no stream to race: the batch views DALI's output, which DALI frees
        # only when the tensor (the DLPack capsule's owner) goes.
        return torch.from_dlpack(dense)

    def _copy_out(self, images: Any, dense: Any) -> torch.Tensor:
        """The GPU output copied, on our stream, into a tensor torch owns.

        Handing DALI's memory out by DLPack is not safe with asynchronous consumers: when the
        caller drops the batch, DALI takes the memory back into its pool in the order of its
        own stream, not of the streams still reading it, and `record_stream` cannot protect
        memory torch's allocator does not own. A device-to-device copy (no host work: a queued
        copy of the uint8 batch, 38.5 MB for 256 images at 224 px) gives a tensor the usual
        stream rules protect. DALI's output is held until the copy's event has completed, never
        waited for.
        """
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            view = torch.from_dlpack(dense)  # the current stream (ours) is DLPack's consumer
            owned = torch.empty_like(view)
            owned.copy_(view, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
        self.leases.hold(copied, images, dense, view)
        return owned

    def _on_cpu(self, plan: EpochPlan, epoch: int, b: int,
                error: str) -> tuple[dict[str, Any], torch.Tensor]:
        """Batch b on the CPU path, which names (or skips) the sample DALI choked on."""
        indices, is_pad = plan.batch(b)
        task = BatchTask(generation=-1, batch_no=b, epoch=epoch, indices=indices, is_pad=is_pad)
        out = np.empty(self.spec.slot_nbytes(len(indices)), dtype=np.uint8)
        meta = self.builder.build(task, out)  # raises DataError for on_error="raise"
        if not meta["skipped"]:
            warnings.warn(f"{self.spec.directory}: DALI failed on batch {b} (samples "
                          f"{indices.tolist()}) but the CPU decoder read it; used the CPU "
                          f"result. DALI said: {error}", stacklevel=2)
        h, w = self.spec.out_size
        images = torch.from_numpy(out[: meta["count"] * h * w * 3]).view(-1, h, w, 3)
        # The captions as a DALI batch carries them: fields of their own.
        captions_to_columns(meta, torch.from_numpy(out), self.spec.caption_offset(len(indices)))
        return meta, images.to(self.device)

    def close(self) -> None:
        self.leases.wait_all()
        self._idle = None
        self.builder.dataset.close()


def _takes_stream(outputs: Any) -> bool:
    """Whether this DALI's `Pipeline.outputs` can bind outputs to a stream."""
    try:
        return "cuda_stream" in inspect.signature(outputs).parameters
    except (TypeError, ValueError):
        return False


def _reason(exc: BaseException) -> str:
    """The useful line of a DALI error (which repeats itself and quotes our graph code)."""
    text = str(exc)
    if "encountered:" in text:
        text = text.split("encountered:", 1)[1]
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and "no longer valid" not in line]
    return " ".join(lines) or type(exc).__name__

