"""A call's device work, recorded once per call signature and replayed.

With the GPU idle when an eager call starts (a call after a synchronisation, or the first
of a model's calls in a step), the host time before its recurrent kernel is queued is
time the GPU waits: ~100 µs of the forward's plan lookups, argument dictionaries and
descriptor building, a fifth of LSTM fp16 H=512 B=8 S=256's whole call
(benchmarks/results/eager-trace-h100-2026-11-25.txt). None of it depends on more than the
call's signature (shapes, strides, pointer alignment, debug knobs), so it is done once:

- The first call of a signature runs the forward through a :class:`Recorder`, which
  queues each operation (launch, memset, 2-D copy, cuBLASLt GEMM) as :class:`Queue` does
  and notes it, with every buffer the call takes (its workspace, its outputs) in order.
- :meth:`Recorder.program` then writes each pointer as (buffer, byte offset): buffer 0 is
  the input, the others the caller's initial states and the call's own. A pointer into
  the model's memory (weights, status words) stays as it is; any other pointer, or two
  buffers that overlap, make the call unreplayable.
- :meth:`CallProgram.run` takes the same buffers in the same order (so outputs are new
  tensors, poisoned under the debug knob as the forward poisons them) and queues the same
  operations with the new pointers, on the new call's stream. A pipelined call's work on
  side streams, and the events between them, are noted by their index among the call's
  streams and events; a replay runs on the side streams of its own caller's stream, with
  events taken for it.

The runtime keys programs by the signature and drops them when the weights move.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from . import driver

# How a buffer of a call is had again on replay: ("take", nbytes, poison), scratch of the
# call's memory; ("make", shape), an array the call returns; ("input",), the caller's next
# array after the input (an initial state).
Allocation = tuple


class Queue:
    """Queues a call's device work at once: the operations a forward issues, in one place
    so that a :class:`Recorder` can note them."""

    def allocated(self, how: Allocation, ptr: int, nbytes: int, array: Any = None) -> None:
        """A buffer the call took (``array``: the object returned to the caller, if any)."""

    def launch(self, kernel: driver.Kernel, grid: tuple[int, int], block: tuple[int, int, int],
               values: list[int], shared: int, stream: int, cooperative: bool) -> None:
        kernel.launch(grid, block, values, shared, stream, cooperative)

    def memset(self, ptr: int, byte: int, nbytes: int, stream: int) -> None:
        driver.memset_async(ptr, byte, nbytes, stream)

    def copy_rows(self, dst: int, dst_pitch: int, src: int, src_pitch: int, width: int,
                  rows: int, stream: int) -> None:
        driver.copy_rows(dst, dst_pitch, src, src_pitch, width, rows, stream)

    def gemm(self, run: Callable[..., None], a: int, b: int, d: int, bias: int, stream: int,
             scratch: int) -> None:
        """A prepared cuBLASLt GEMM (cublaslt.CublasLt.prepared's run)."""
        run(a, b, d, bias, stream, scratch)

    def forked(self, side: list[int], events: list[int]) -> None:
        """The side streams and events a call uses besides its own stream (a pipelined
        call's), taken for it before any of its work on them."""

    def record(self, event: int, stream: int) -> None:
        driver.event_record(event, stream)

    def wait(self, stream: int, event: int) -> None:
        driver.stream_wait_event(stream, event)

DIRECT = Queue()  # stateless: queues and forgets


class Unreplayable(Exception):
    """A recorded call that a program cannot repeat (a pointer outside every known buffer,
    work on a stream or event the call was not given, a result that is not one of the
    call's arrays)."""


class Recorder(Queue):
    """Queues each operation by ``inner`` and notes it and every buffer of one call, on
    ``stream``. ``input``: (pointer, bytes) of the call's input; ``constants``: (pointer,
    bytes) of the model's memory, whose pointers a program keeps as they are."""

    def __init__(self, stream: int, input: tuple[int, int], constants: list[tuple[int, int]],
                 inner: Queue = DIRECT):
        self._inner = inner
        self._streams = [stream]  # the call's, then its side streams (forked)
        self._events: list[int] = []
        self._buffers: list[tuple[int, int]] = [input]
        self._constants = constants
        self._ops: list[tuple] = []
        self._slot_of_array: dict[int, int] = {}
        self._arrays: list[Any] = []  # kept, so that ids stay theirs until program()
        self._why_not: str | None = None

    def allocated(self, how: Allocation, ptr: int, nbytes: int, array: Any = None) -> None:
        slot = len(self._buffers)
        self._buffers.append((ptr, nbytes))
        self._ops.append(("buffer", how, slot))
        if array is not None:
            self._slot_of_array[id(array)] = slot
            self._arrays.append(array)

    def _on(self, stream: int) -> int:
        """The index of ``stream`` among the call's (0: its own)."""
        if stream in self._streams:
            return self._streams.index(stream)
        self._why_not = "work on a stream the call did not fork"
        return 0

    def _event(self, event: int) -> int:
        if event in self._events:
            return self._events.index(event)
        self._why_not = "an event the call was not given"
        return 0

    def launch(self, kernel, grid, block, values, shared, stream, cooperative) -> None:
        self._inner.launch(kernel, grid, block, values, shared, stream, cooperative)
        self._ops.append(("launch", self._on(stream), kernel, grid, block, list(values), shared,
                          cooperative))

    def memset(self, ptr, byte, nbytes, stream) -> None:
        self._inner.memset(ptr, byte, nbytes, stream)
        self._ops.append(("memset", self._on(stream), ptr, byte, nbytes))

    def copy_rows(self, dst, dst_pitch, src, src_pitch, width, rows, stream) -> None:
        self._inner.copy_rows(dst, dst_pitch, src, src_pitch, width, rows, stream)
        self._ops.append(("copy_rows", self._on(stream), dst, dst_pitch, src, src_pitch, width, rows))

    def gemm(self, run, a, b, d, bias, stream, scratch) -> None:
        self._inner.gemm(run, a, b, d, bias, stream, scratch)
        self._ops.append(("gemm", self._on(stream), run, a, b, d, bias, scratch))

    def forked(self, side, events) -> None:
        self._streams += side
        self._events += events

    def record(self, event, stream) -> None:
        self._inner.record(event, stream)
        self._ops.append(("record", self._on(stream), self._event(event)))

    def wait(self, stream, event) -> None:
        self._inner.wait(stream, event)
        self._ops.append(("wait", self._on(stream), self._event(event)))

    def _pointer(self, ptr: int) -> tuple[int, int]:
        """(buffer, offset) of a pointer, buffer −1 for a constant (0 or the model's)."""
        if ptr == 0 or any(start <= ptr < start + n for start, n in self._constants):
            return -1, ptr
        for i, (start, n) in enumerate(self._buffers):
            if start <= ptr < start + n:
                return i, ptr - start
        # One past a buffer's end (an empty part at a workspace's end); never dereferenced.
        for i, (start, n) in enumerate(self._buffers):
            if ptr == start + n:
                return i, n
        raise Unreplayable(f"pointer {ptr:#x} lies in none of the call's buffers")

    def program(self, result: Any) -> "CallProgram":
        """The recorded call as a program; raises :class:`Unreplayable`."""
        if self._why_not:
            raise Unreplayable(self._why_not)
        spans = sorted(self._buffers)
        if any(a[0] + a[1] > b[0] for a, b in zip(spans, spans[1:])):
            # (one array given twice, say): a pointer would not say whose it is
            raise Unreplayable("two of the call's buffers overlap")
        # Each step: (kind, the index of its stream among the call's, what it needs).
        steps: list[tuple] = []
        for op in self._ops:
            kind = op[0]
            if kind in ("buffer", "record", "wait"):
                steps.append(op)
            elif kind == "launch":
                _, on, kernel, grid, block, values, shared, cooperative = op
                patches = []
                for i, k in enumerate(kernel.kinds):
                    if k == "ptr":
                        slot, offset = self._pointer(values[i])
                        if slot >= 0:
                            patches.append((i, slot, offset))
                steps.append(("launch", on, kernel, grid, block, values, tuple(patches), shared,
                              cooperative))
            elif kind == "memset":
                _, on, ptr, byte, nbytes = op
                steps.append(("memset", on, self._pointer(ptr), byte, nbytes))
            elif kind == "copy_rows":
                _, on, dst, dst_pitch, src, src_pitch, width, rows = op
                steps.append(("copy_rows", on, self._pointer(dst), dst_pitch, self._pointer(src),
                              src_pitch, width, rows))
            else:
                _, on, run, *pointers = op
                steps.append(("gemm", on, run, tuple(self._pointer(p) for p in pointers)))
        return CallProgram(_late_arrays(steps), len(self._buffers), len(self._streams) - 1,
                           len(self._events), _template(result, self._slot_of_array))


def _slots_read(step: tuple) -> set[int]:
    """The buffers whose pointers a program step uses."""
    kind = step[0]
    if kind == "launch":
        return {slot for _, slot, _ in step[6]}
    if kind == "gemm":
        return {slot for slot, _ in step[3]}
    if kind == "memset":
        return {step[2][0]}
    if kind == "copy_rows":
        return {step[2][0], step[4][0]}
    return set()


def _late_arrays(steps: list[tuple]) -> tuple[tuple, ...]:
    """The steps with each returned array made right before the first step that uses it
    (the rest in place): the forward makes its outputs before its first launch, and on a
    replay that host time would hold back the projection, which needs none of them.
    A call on several streams keeps the forward's order: an array made after the fork is
    poisoned (under the debug knob) on the call's stream, unordered with side-stream work
    that writes it."""
    if any(s[0] == "record" for s in steps):
        return tuple(steps)
    arrays = [s for s in steps if s[0] == "buffer" and s[1][0] == "make"]
    out = [s for s in steps if not (s[0] == "buffer" and s[1][0] == "make")]
    for made in reversed(arrays):  # the later first, so that earlier ones land before them
        slot = made[2]
        first = next((i for i, s in enumerate(out) if slot in _slots_read(s)), len(out))
        out.insert(first, made)
    return tuple(out)


@dataclass(frozen=True)
class _Array:
    """In a program's result: the array made as buffer ``slot``."""

    slot: int


def _template(result: Any, slot_of_array: dict[int, int]) -> Any:
    """``result`` with each array replaced by its :class:`_Array`."""
    if result is None:
        return None
    if isinstance(result, tuple):
        return tuple(_template(r, slot_of_array) for r in result)
    if isinstance(result, dict):
        return {k: _template(v, slot_of_array) for k, v in result.items()}
    slot = slot_of_array.get(id(result))
    if slot is None:
        raise Unreplayable(f"a result ({type(result).__name__}) is not one of the call's arrays")
    return _Array(slot)


def _fill(template: Any, arrays: dict[int, Any]) -> Any:
    if isinstance(template, _Array):
        return arrays[template.slot]
    if isinstance(template, dict):
        return {k: _fill(v, arrays) for k, v in template.items()}
    if isinstance(template, tuple):
        return tuple(_fill(t, arrays) for t in template)
    return template  # None


@dataclass(frozen=True)
class CallProgram:
    """A recorded call: its steps with pointers as (buffer, offset) (buffer −1: as is),
    streams and events as their index among the call's, and its result's structure."""

    steps: tuple[tuple, ...]
    buffers: int  # the input's and the call's
    side_streams: int  # streams besides the call's own (a pipelined call's)
    events: int
    result: Any

    @cached_property
    def result_slots(self) -> tuple[int, ...]:
        """The buffers the result returns, each once, in the result's order (worked out once:
        a graph's replay reads it every call)."""
        slots: list[int] = []

        def walk(t: Any) -> None:
            if isinstance(t, _Array):
                if t.slot not in slots:
                    slots.append(t.slot)
            elif isinstance(t, dict):
                for v in t.values():
                    walk(v)
            elif isinstance(t, tuple):
                for v in t:
                    walk(v)
        walk(self.result)
        return tuple(slots)

    def result_arrays(self, result: Any) -> list[Any]:
        """A result of this program's as a list: its arrays in ``result_slots`` order."""
        found: dict[int, Any] = {}

        def walk(t: Any, r: Any) -> None:
            if isinstance(t, _Array):
                found.setdefault(t.slot, r)
            elif isinstance(t, dict):
                for k, v in t.items():
                    walk(v, r[k])
            elif isinstance(t, tuple):
                for v, rv in zip(t, r):
                    walk(v, rv)
        walk(self.result, result)
        return [found[slot] for slot in self.result_slots]

    def result_of(self, arrays: list[Any]) -> Any:
        """The result whose ``result_arrays`` are ``arrays``."""
        return _fill(self.result, dict(zip(self.result_slots, arrays)))

    def operations(self) -> int:
        """How many operations a run queues on the device (launches, GEMMs, copies,
        memsets, event records and waits)."""
        return sum(1 for step in self.steps if step[0] != "buffer")

    def buffer_bytes(self, itemsize: int) -> int:
        """The bytes of the buffers a run takes and makes (arrays made of ``itemsize``
        elements), not counting the caller's."""
        total = 0
        for step in self.steps:
            if step[0] == "buffer":
                how = step[1]
                if how[0] == "take":
                    total += how[1]
                elif how[0] == "make":
                    total += itemsize * math.prod(how[1])
        return total

    def run(self, inputs: list[int], streams: list[int], events: list[int],
            take: Callable[[int, bool], int], make: Callable[[tuple[int, ...]], tuple[Any, int]],
            queue: Queue = DIRECT) -> Any:
        """Queue the call again by ``queue`` for the caller's arrays at ``inputs`` (the
        input, then each initial state in the forward's order) on ``streams`` (the
        caller's, then side_streams forked from it) with ``events`` (that many, the
        call's alone until it returns): buffers from ``take(nbytes, poison)`` (scratch)
        and ``make(shape)`` ((array, pointer) returned to the caller); returns the result
        with the new arrays."""
        base = [inputs[0]] + [0] * (self.buffers - 1)
        given = iter(inputs[1:])
        arrays: dict[int, Any] = {}

        def at(p: tuple[int, int]) -> int:
            return p[1] if p[0] < 0 else base[p[0]] + p[1]
        for step in self.steps:
            kind = step[0]
            if kind == "buffer":
                how, slot = step[1], step[2]
                if how[0] == "take":
                    base[slot] = take(how[1], how[2])
                elif how[0] == "make":
                    arrays[slot], base[slot] = make(how[1])
                else:
                    base[slot] = next(given)
                continue
            stream = streams[step[1]]
            if kind == "launch":
                _, _, kernel, grid, block, values, patches, shared, cooperative = step
                if patches:
                    values = values.copy()
                    for i, slot, offset in patches:
                        values[i] = base[slot] + offset
                queue.launch(kernel, grid, block, values, shared, stream, cooperative)
            elif kind == "gemm":
                a, b, d, bias, scratch = (at(p) for p in step[3])
                queue.gemm(step[2], a, b, d, bias, stream, scratch)
            elif kind == "record":
                queue.record(events[step[2]], stream)
            elif kind == "wait":
                queue.wait(stream, events[step[2]])
            elif kind == "memset":
                queue.memset(at(step[2]), step[3], step[4], stream)
            else:
                _, _, dst, dst_pitch, src, src_pitch, width, rows = step
                queue.copy_rows(at(dst), dst_pitch, at(src), src_pitch, width, rows, stream)
        return _fill(self.result, arrays)
