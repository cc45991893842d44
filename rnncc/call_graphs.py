"""Eager calls replayed from CUDA graphs: the training backward (issue 17's eager rows) and
the forward's recorded programs (issue 14's and 15's eager rows).

A small recurrent model's eager call is host-bound. At LSTM fp16 H=512 B=8 S=256 the twin's
backward queued ~50 torch operators and rnncc launches, ~1.0 ms of host time a step against
~0.7 ms of GPU work (results/train-host-split-h100-2026-11-25-at-0ed9900.txt); a replayed
forward program still queues a cuBLASLt call, a launch a layer and chunk and an allocation
an output, so a drained call's GPU waits ~30–230 µs for them (bench-h100-2026-11-27.json:
eager against graph columns). What either queues depends only on the signature of what it
reads (shapes, strides and dtypes; which gradients are None), on the model's memory (read
in place), on the stream and on the settings that choose kernels. So a signature seen a
second time is captured once in a CUDA graph, and every later call with it

1. copies its inputs into the graph's own (``copy_into``: one foreach copy for the small
   ones, a copy each for the large),
2. replays the graph on the caller's stream,
3. copies the graph's outputs out, into memory of the caller's that the next replay does
   not overwrite: ``packed`` outputs as one buffer and views of it (one copy; the
   backward's gradients), ``separate`` ones each into a tensor of its own (as torch.nn's
   outputs are: no storage shared; the forward's, whose copies are queued while the graph
   runs, off the GPU's path).

The first sighting runs directly: it loads the kernels and warms the libraries a capture
must not initialise. A call on a capturing stream runs directly too (the caller's own
graph takes its launches), and so does one whose capture failed once (the reason is kept)
or whose graph was dropped to make room: a caller cycling through more signatures than
the cache holds (bucketed sequence lengths) would otherwise pay a capture (a device
synchronisation, the allocator's cache emptied, tens of ms) again and again.
Which calls are worth a graph, given the memory it keeps, is the caller's decision
(``backward.graph_worthy``; ``runtime.GRAPH_MIN_OPERATIONS`` and ``FORWARD_GRAPH_BYTES``).
The torch.compile path is not replayed here: a compiled graph has its own cudagraphs mode.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Hashable, Sequence

import torch

from .arrays import torch_stream
from .errors import RnnccError

# Tensors of at least this many bytes are copied by a copy_ each, the rest by one foreach
# copy: torch's foreach copy gives a large tensor few blocks (4 MiB: 9.0 µs of GPU against
# 3.2 by copy_), while a copy_ costs 8.6-9.1 µs of host whatever its size, about what one
# foreach copy of all the small ones costs (results/replay-host-parts-h100-2026-11-28.txt;
# −4 to −18 µs a stack call on three of four cases, +8 on one).
LARGE_COPY_BYTES = 256 * 1024

# Outputs start at multiples of this many bytes in the packed buffer (the allocator's own
# alignment), so every view is as aligned as a tensor of its own.
OUTPUT_ALIGNMENT = 256


def signature(tensors: Sequence[torch.Tensor | None]) -> tuple:
    """What a captured graph assumed of its inputs: each one's shape, strides and dtype, or
    None for a missing one (a gradient autograd did not materialise)."""
    return tuple(None if t is None else (tuple(t.shape), t.stride(), t.dtype) for t in tensors)


def packed_offsets(sizes: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """(byte offset of each output in the packed buffer, the buffer's bytes) for outputs of
    ``sizes`` bytes, each at a multiple of OUTPUT_ALIGNMENT."""
    offsets, end = [], 0
    for size in sizes:
        end = -(-end // OUTPUT_ALIGNMENT) * OUTPUT_ALIGNMENT
        offsets.append(end)
        end += size
    return tuple(offsets), max(end, 1)


def copy_into(destinations: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """destinations[i].copy_(sources[i]) for every i, on the current stream: the large ones
    (LARGE_COPY_BYTES and up) one by one, the small ones by one foreach copy."""
    small_dst, small_src = [], []
    for d, s in zip(destinations, sources, strict=True):
        if d.numel() * d.element_size() >= LARGE_COPY_BYTES:
            d.copy_(s)
        else:
            small_dst.append(d)
            small_src.append(s)
    if small_dst:
        torch._foreach_copy_(small_dst, small_src)


@dataclass(frozen=True)
class _Output:
    """One output's place in the packed buffer."""
    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]

    def view(self, buffer: torch.Tensor) -> torch.Tensor:
        """This output in ``buffer`` (uint8): a slice, reinterpreted, shaped."""
        return buffer[self.offset:self.offset + self.nbytes].view(self.dtype).view(self.shape)

    def strided(self, typed: torch.Tensor) -> torch.Tensor:
        """This output in ``typed``, the buffer viewed as this output's dtype: one
        as_strided where ``view`` takes three operators (7 outputs of a replayed LSTM
        backward: 6.9 against 25 µs of host, timed on CPU tensors)."""
        return typed.as_strided(self.shape, contiguous_strides(self.shape), self.offset // self.dtype.itemsize)


@lru_cache(maxsize=1024)
def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``, in elements."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def one_dtype(outputs: Sequence[_Output], nbytes: int) -> torch.dtype | None:
    """The dtype every output has, where a buffer of ``nbytes`` viewed as it holds them all
    (offsets are multiples of OUTPUT_ALIGNMENT); else None."""
    dtypes = {o.dtype for o in outputs}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    return dtype if nbytes % dtype.itemsize == 0 else None


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: list[torch.Tensor]   # the graph's copies of the present inputs, in order
    packed: torch.Tensor | None  # uint8, every output at its _Output.offset (packed)
    outputs: tuple[_Output, ...]
    dtype: torch.dtype | None    # every packed output's (one_dtype): views by _Output.strided
    statics: list[torch.Tensor]  # the body's own outputs, in the graph's memory (separate)
    lock: threading.Lock         # one replay at a time: its inputs and outputs are shared


OUTPUT_FORMS = ("packed", "separate")


def _remember(table: OrderedDict, key: Hashable, value, most: int) -> None:
    """table[key] = value, the oldest entry forgotten past ``most``."""
    table[key] = value
    if len(table) > most:
        table.popitem(last=False)


class CallGraphs:
    """Captured calls by key, the least recently used dropped past ``capacity`` (each keeps
    its temporaries), their outputs handed out ``outputs`` (one of OUTPUT_FORMS; see the
    module's docstring)."""

    def __init__(self, capacity: int = 4, remembered: int = 64, outputs: str = "packed",
                 refused: int = 1024):
        if outputs not in OUTPUT_FORMS:
            raise ValueError(f"call_graphs: outputs {outputs!r}, expected one of {OUTPUT_FORMS}")
        self.capacity, self.remembered, self.outputs = capacity, remembered, outputs
        self._captured: OrderedDict[Hashable, _Captured] = OrderedDict()
        self._seen: OrderedDict[Hashable, None] = OrderedDict()  # sighted once, not captured
        # Signatures not captured again, the newest ``refused`` of each kind (a process that
        # sees ever new shapes must not grow them without bound; one forgotten is captured
        # again at most once more).
        self.refused = refused
        self.failed: OrderedDict[Hashable, str] = OrderedDict()    # why a capture failed
        self.dropped: OrderedDict[Hashable, None] = OrderedDict()  # evicted for room
        self.captures = 0                                         # graphs captured so far
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._captured)

    def run(self, key: Hashable, inputs: Sequence[torch.Tensor | None],
            body: Callable[[list], list[torch.Tensor]]) -> list[torch.Tensor]:
        """``body(inputs)``'s outputs, from a replay of its graph where one is captured for
        ``key`` (what the body reads besides ``inputs``: the weights' addresses, the
        settings), the inputs' signature and the current stream; captured on a second
        sighting. ``inputs`` are copied into the graph's (None stays None)."""
        if torch.cuda.is_current_stream_capturing():
            return body(list(inputs))
        device = torch.cuda.current_device()
        full = (key, signature(inputs), device, torch_stream(device))
        with self._lock:
            captured = self._captured.get(full)
            if captured is not None:
                self._captured.move_to_end(full)
            elif full in self.failed or full in self.dropped:
                return body(list(inputs))
            elif full not in self._seen:
                self._seen[full] = None
                if len(self._seen) > self.remembered:
                    self._seen.popitem(last=False)
                return body(list(inputs))
            else:
                del self._seen[full]
                try:
                    captured = self._capture(inputs, body, self.outputs == "packed")
                except RnnccError:  # the body's own (a timeout reported): not the capture's
                    raise
                except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
                    _remember(self.failed, full, f"{type(e).__name__}: {e}", self.refused)
                    return body(list(inputs))
                self._captured[full] = captured
                self.captures += 1
                if len(self._captured) > self.capacity:
                    _remember(self.dropped, self._captured.popitem(last=False)[0], None, self.refused)
        return self._replay(captured, inputs)

    @staticmethod
    def _capture(inputs: Sequence[torch.Tensor | None], body, packs: bool) -> _Captured:
        """The body captured on the graph's copies of ``inputs`` (contiguous: a source may
        be expanded, as autograd's gradient of a sum is), its outputs packed at the end
        where ``packs``, else kept where the body made them."""
        # Normal tensors even under inference_mode: a replay outside it copies into them, which
        # an inference tensor refuses (a forward captured in an inference_mode block and
        # called after it would fail).
        with torch.inference_mode(False):
            static = [None if t is None else torch.empty(t.shape, dtype=t.dtype, device=t.device)
                      for t in inputs]
        graph = torch.cuda.CUDAGraph()
        # thread_local: the capture does not fail for other threads' CUDA calls meanwhile.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            outs = body(list(static))
            if not packs:
                return _Captured(graph, [t for t in static if t is not None], None, (), None, list(outs),
                                 threading.Lock())
            sizes = [o.numel() * o.element_size() for o in outs]
            offsets, total = packed_offsets(sizes)
            packed = torch.empty(total, dtype=torch.uint8, device=outs[0].device)
            places = tuple(_Output(off, size, o.dtype, tuple(o.shape))
                           for off, size, o in zip(offsets, sizes, outs))
            for place, o in zip(places, outs):
                if o.numel():
                    place.view(packed).copy_(o)
            del outs
        return _Captured(graph, [t for t in static if t is not None], packed, places, one_dtype(places, total),
                         [], threading.Lock())

    @staticmethod
    def _replay(captured: _Captured, inputs: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
        present = [t for t in inputs if t is not None]
        with captured.lock:  # host threads on one stream: each call's copies, then its replay
            copy_into(captured.inputs, present)
            captured.graph.replay()
            if captured.packed is None:
                mine = [torch.empty_like(t) for t in captured.statics]
                copy_into(mine, captured.statics)
                return mine
            packed = captured.packed.clone()
        if captured.dtype is not None:
            typed = packed.view(captured.dtype)
            return [place.strided(typed) for place in captured.outputs]
        return [place.view(packed) for place in captured.outputs]
