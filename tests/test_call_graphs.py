"""Calls replayed from CUDA graphs, their pure parts on the CPU (rnncc.call_graphs): what a
graph's key holds of its inputs, where packed outputs sit, and which backwards are worth a
graph. The replays themselves are GPU tests (test_gpu_backward.py, test_gpu.py)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import rnncc.backward as backward  # noqa: E402
from rnncc.call_graphs import (LARGE_COPY_BYTES, OUTPUT_ALIGNMENT, CallGraphs, copy_into,  # noqa: E402
                               packed_offsets, signature)
from rnncc.ir import Model  # noqa: E402


def test_signature_tells_shapes_strides_dtypes_and_missing_inputs_apart():
    a = torch.zeros(4, 3)
    sig = signature([a, None])
    assert sig == (((4, 3), (3, 1), torch.float32), None)
    assert signature([a.t().contiguous().t(), None]) != sig  # same shape, other strides
    assert signature([a.half(), None]) != sig
    assert signature([a, a]) != sig  # a gradient present where it was None
    assert signature([torch.zeros(3).expand(4, 3), None])[0][1] == (0, 1)  # autograd's sum grad


def test_copy_into_copies_large_tensors_apart_and_the_rest_in_one_foreach(monkeypatch):
    large = LARGE_COPY_BYTES // 4  # float32 elements of a tensor at the threshold
    sources = [torch.randn(large), torch.randn(3, 5), torch.randn(large + 1).half(),
               torch.randn(7), torch.randn(1, large // 2).expand(2, large // 2)]
    destinations = [torch.empty(s.shape, dtype=s.dtype) for s in sources]
    foreach = []
    real = torch._foreach_copy_

    def recorded(dst, src):
        foreach.append([d.numel() for d in dst])
        return real(dst, src)
    monkeypatch.setattr(torch, "_foreach_copy_", recorded)
    copy_into(destinations, sources)
    for d, s in zip(destinations, sources):
        assert torch.equal(d, s)
    # One foreach copy of the small ones: the half tensor of large + 1 elements is half the
    # threshold's bytes; the expanded source's destination (2 × large / 2 floats) is at it.
    assert foreach == [[15, large + 1, 7]]
    with pytest.raises(ValueError):
        copy_into(destinations[:2], sources[:1])


def test_packed_offsets_align_every_output_and_keep_empty_ones():
    offsets, total = packed_offsets([10, 0, 513, 4])
    # 10 bytes, then the empty one and 513 bytes at the next boundary, 4 bytes past those.
    assert offsets == (0, OUTPUT_ALIGNMENT, OUTPUT_ALIGNMENT, 4 * OUTPUT_ALIGNMENT)
    assert total == 4 * OUTPUT_ALIGNMENT + 4
    assert all(o % OUTPUT_ALIGNMENT == 0 for o in offsets)
    assert packed_offsets([]) == ((), 1)  # never a zero-byte buffer


def test_outputs_of_one_dtype_are_the_same_views_by_one_as_strided():
    """A replay hands its packed outputs out by ``_Output.strided`` where they share a
    dtype: the same elements, shapes and contiguous strides as the three-operator view,
    empty outputs and 0-d ones included; mixed dtypes keep the view."""
    from rnncc.call_graphs import _Output, contiguous_strides, one_dtype

    shapes = [(3, 5, 7), (0,), (2, 0, 3), (), (1024,), (4, 1)]
    sizes = [math.prod(s) * 2 for s in shapes]
    offsets, total = packed_offsets(sizes)
    places = [_Output(o, n, torch.float16, s) for o, n, s in zip(offsets, sizes, shapes)]
    packed = torch.randint(0, 256, (total,), dtype=torch.uint8)
    assert one_dtype(places, total) == torch.float16
    typed = packed.view(torch.float16)
    for place in places:
        a, b = place.strided(typed), place.view(packed)
        assert a.shape == b.shape and a.stride() == b.stride() == contiguous_strides(place.shape)
        assert a.data_ptr() == b.data_ptr() and torch.equal(a.view(torch.int16), b.view(torch.int16))
    mixed = places[:1] + [_Output(OUTPUT_ALIGNMENT * 2, 16, torch.float32, (4,))]
    assert one_dtype(mixed, total) is None
    assert one_dtype(places[:1], 3) is None  # a buffer that is no whole number of halves


def lstm_model(hidden: int, layers: int = 1) -> Model:
    raw = {"name": "m", "dtype": "float16", "input_size": 16,
           "layers": [{"name": f"l{i}", "cell": "lstm", "hidden_size": hidden} for i in range(layers)]}
    return Model.from_dict(raw)


def test_graph_worthy_keeps_host_bound_backwards_and_leaves_large_ones():
    # float32 pre-activations of the largest layer: S·B·4H·4 bytes against 32 MiB.
    assert backward.graph_worthy(lstm_model(512, 8), 256, 8)      # 16 MiB: the bench's fp16 row
    assert backward.graph_worthy(lstm_model(1024), 256, 8)        # 32 MiB: the bf16 row, just in
    assert not backward.graph_worthy(lstm_model(1024), 256, 64)   # 256 MiB: GPU-bound anyway
    assert not backward.graph_worthy(lstm_model(1024), 257, 8)    # past the bound by one step


def test_a_fresh_cache_has_captured_nothing():
    graphs = CallGraphs(capacity=2)
    assert len(graphs) == 0 and graphs.captures == 0 and not graphs.failed


def test_outputs_are_packed_or_separate_and_nothing_else():
    assert CallGraphs(outputs="separate").outputs == "separate"
    with pytest.raises(ValueError, match="outputs 'views'"):
        CallGraphs(outputs="views")


def test_refused_signatures_are_bounded():
    """Failed and dropped signatures are remembered, so that a caller cycling through more
    shapes than the cache holds does not pay a capture each call; only the newest
    ``refused`` of each, so that a process seeing ever new shapes does not grow them."""
    from collections import OrderedDict

    from rnncc.call_graphs import _remember

    graphs = CallGraphs(capacity=2, refused=3)
    assert graphs.refused == 3 and isinstance(graphs.dropped, OrderedDict)
    for i in range(5):
        _remember(graphs.failed, ("key", i), f"reason {i}", graphs.refused)
    assert list(graphs.failed) == [("key", 2), ("key", 3), ("key", 4)]
    assert graphs.failed[("key", 4)] == "reason 4"
