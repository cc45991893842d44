"""call_program: a recorded call's pointers as (buffer, offset), and its replay with new
buffers. The operations go to a queue that lists them (the GPU tests run real ones:
test_gpu.py's replayed-call tests)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rnncc.call_program import Queue, Recorder, Unreplayable

X, WS, Y, WEIGHTS = 0x10_0000, 0x20_0000, 0x30_0000, 0x90_0000
STREAM = 7
KERNEL = SimpleNamespace(name="k", kinds=("ptr", "i32", "ptr", "ptr", "i64"))


class Listed(Queue):
    """Lists the operations instead of queueing them."""

    def __init__(self):
        self.done = []

    def launch(self, kernel, grid, block, values, shared, stream, cooperative):
        self.done.append(("launch", grid, list(values), stream, cooperative))

    def memset(self, ptr, byte, nbytes, stream):
        self.done.append(("memset", ptr, byte, nbytes, stream))

    def copy_rows(self, dst, dst_pitch, src, src_pitch, width, rows, stream):
        self.done.append(("copy_rows", dst, src, stream))

    def gemm(self, run, a, b, d, bias, stream, scratch):
        self.done.append(("gemm", run, a, b, d, bias, scratch, stream))

    def record(self, event, stream):
        self.done.append(("record", event, stream))

    def wait(self, stream, event):
        self.done.append(("wait", stream, event))


def record(stream=STREAM, result=None, extra_pointer=None):
    """A call as the runtime issues one: its workspace, an output, a memset, a launch, a
    GEMM and a copy; returns (recorder, the output array, what it queued)."""
    listed = Listed()
    r = Recorder(STREAM, (X, 4096), [(WEIGHTS, 1 << 16)], inner=listed)
    r.allocated(("take", 1024, True), WS, 1024)
    y = object()
    r.allocated(("make", (3, 4)), Y, 24, y)
    r.memset(WS + 512, 0, 64, stream)
    r.launch(KERNEL, (2, 1), (128, 1, 1), [X + 8, 5, WS + 1024, extra_pointer or 0, 99], 0, stream, True)
    r.gemm("run", WEIGHTS + 32, X, WS, WEIGHTS + 8, stream, WS + 256)
    r.copy_rows(Y, 8, WS + 100, 16, 8, 3, stream)
    return r, y, listed


def test_replay_puts_each_pointer_in_the_new_buffers():
    r, y, listed = record()
    assert len(listed.done) == 4  # the recorder queued everything as it went
    program = r.program((y, {"l0": (y, None)}))
    replayed = Listed()
    new_y = object()
    taken = []

    def take(nbytes, poison):
        replayed.done.append(("take", nbytes, poison))
        return 0x60_0000

    def make(shape):
        replayed.done.append(("make", shape))
        return new_y, 0x70_0000

    result = program.run([0x50_0000], [11], [], take, make, queue=replayed)
    assert result == (new_y, {"l0": (new_y, None)})
    assert replayed.done == [
        ("take", 1024, True),
        ("memset", 0x60_0000 + 512, 0, 64, 11),
        # a pointer one past the workspace (an empty part at its end) stays one past it
        ("launch", (2, 1), [0x50_0008, 5, 0x60_0000 + 1024, 0, 99], 11, True),
        ("gemm", "run", WEIGHTS + 32, 0x50_0000, 0x60_0000, WEIGHTS + 8, 0x60_0100, 11),
        ("make", (3, 4)),  # made when first needed, not where the forward made it
        ("copy_rows", 0x70_0000, 0x60_0000 + 100, 11),
    ]


def test_a_result_as_a_list_of_its_arrays_and_back():
    """What a graph of the call keeps (call_graphs.py): the result's arrays, each once, in
    the result's order, and the result again from new arrays; and the bytes a run takes
    and makes, which decide whether it is worth a graph."""
    listed = Listed()
    r = Recorder(STREAM, (X, 4096), [], inner=listed)
    r.allocated(("take", 1000, True), WS, 1000)
    y, h, c = object(), object(), object()
    r.allocated(("make", (3, 4)), Y, 24, y)
    r.allocated(("make", (2,)), Y + 64, 4, h)
    r.allocated(("make", (5,)), Y + 128, 10, c)
    r.launch(KERNEL, (1, 1), (32, 1, 1), [X, 0, Y, Y + 64, Y + 128], 0, STREAM, False)
    result = (y, {"l1": (c, h), "l0": y})  # y returned twice, c before h
    program = r.program(result)
    assert program.result_arrays(result) == [y, c, h]
    new = ["y'", "c'", "h'"]
    assert program.result_of(new) == ("y'", {"l1": ("c'", "h'"), "l0": "y'"})
    assert program.buffer_bytes(2) == 1000 + 2 * (12 + 2 + 5)  # the input is the caller's
    assert program.operations() == 1


def test_a_pointer_outside_every_buffer_is_not_replayed():
    r, y, _ = record(extra_pointer=0x40_0000)
    with pytest.raises(Unreplayable, match="none of the call's buffers"):
        r.program(y)


def test_work_on_another_stream_is_not_replayed():
    r, y, _ = record(stream=STREAM + 1)
    with pytest.raises(Unreplayable, match="stream the call did not fork"):
        r.program(y)


def test_a_result_not_made_by_the_call_is_not_replayed():
    r, _, _ = record()
    with pytest.raises(Unreplayable, match="not one of the call's arrays"):
        r.program((object(), {}))


def test_initial_states_are_inputs_taken_in_order():
    listed = Listed()
    r = Recorder(STREAM, (X, 4096), [], inner=listed)
    r.allocated(("input",), 0x11_0000, 64)  # h0
    r.allocated(("input",), 0x12_0000, 64)  # c0
    r.launch(KERNEL, (1, 1), (32, 1, 1), [X, 1, 0x12_0000 + 8, 0x11_0000, 0], 0, STREAM, False)
    replayed = Listed()
    r.program(None).run([0x50_0000, 0x51_0000, 0x52_0000], [3], [], None, None, queue=replayed)
    assert replayed.done == [("launch", (1, 1), [0x50_0000, 1, 0x52_0008, 0x51_0000, 0], 3, False)]


def test_buffers_that_overlap_are_not_replayed():
    r = Recorder(STREAM, (X, 4096), [], inner=Listed())
    r.allocated(("input",), X + 1024, 64)  # a state inside the input
    with pytest.raises(Unreplayable, match="overlap"):
        r.program(None)


def test_a_pipelined_call_replays_on_its_callers_side_streams_with_new_events():
    """Side streams and events are noted by their index among the call's: a replay runs
    on the streams and events it is given (the side streams of its own caller's stream).
    Its arrays are made where the forward made them, before the fork (made after it,
    their poisoning on the call's stream would race the side streams' writes)."""
    listed = Listed()
    r = Recorder(STREAM, (X, 4096), [], inner=listed)
    y = object()
    r.allocated(("make", (3, 4)), Y, 24, y)
    side, events = [21, 22], [31, 32, 33]
    r.forked(side, events)
    r.record(31, STREAM)
    r.wait(22, 31)
    r.launch(KERNEL, (1, 1), (32, 1, 1), [X, 1, Y, 0, 0], 0, 22, False)
    r.record(33, 22)
    r.wait(STREAM, 33)
    program = r.program(y)
    assert (program.side_streams, program.events) == (2, 3)
    replayed = Listed()

    def make(shape):
        replayed.done.append(("make", shape))
        return "new y", 0x70_0000
    assert program.run([0x50_0000], [3, 41, 42], [51, 52, 53], None, make, queue=replayed) == "new y"
    assert replayed.done == [("make", (3, 4)), ("record", 51, 3), ("wait", 42, 51),
                             ("launch", (1, 1), [0x50_0000, 1, 0x70_0000, 0, 0], 42, False),
                             ("record", 53, 42), ("wait", 3, 53)]


def test_an_event_the_call_was_not_given_is_not_replayed():
    r = Recorder(STREAM, (X, 4096), [], inner=Listed())
    r.forked([21], [31])
    r.record(99, 21)
    with pytest.raises(Unreplayable, match="event the call was not given"):
        r.program(None)


def test_a_training_calls_key_holds_what_its_gates_are_checked_for():
    """A call with ``gates`` is replayed from its tensors alone (CompiledModel._replay_key):
    the key holds each buffer's layer, pairing, shape, strides, dtype, device and
    alignment, which _gate_arrays checks on the long way; a buffer that is not a PyTorch
    tensor keys nothing (the long way)."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from rnncc.runtime import CompiledModel

    x = torch.zeros(7, 5, 12)
    env = {}
    buffer = torch.zeros(7, 5, 68)
    plain = CompiledModel._replay_key(x, False, False, env)
    key = CompiledModel._replay_key(x, False, False, env, {"a": buffer})
    assert key[:len(plain)] == plain and key != plain
    assert CompiledModel._replay_key(x, False, False, env, {"a": buffer}) == key
    others = [{"b": buffer}, {"a": buffer.double()}, {"a": torch.zeros(7, 5, 69)[..., :68]},
              {"a": (buffer, buffer.clone())}, {"a": torch.zeros(7, 6, 68)},
              {"a": torch.zeros(7 * 5 * 68 + 1)[1:].view(7, 5, 68)}]
    assert len({key, *(CompiledModel._replay_key(x, False, False, env, g) for g in others)}) == 1 + len(others)
    assert CompiledModel._replay_key(x, False, False, env, {"a": np.zeros((7, 5, 68), np.float32)}) is None
    assert CompiledModel._replay_key(x, False, False, env, {"a": (buffer, np.zeros(1))}) is None
