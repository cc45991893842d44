"""What an eager call replayed from a CUDA graph could cost if its copies were the graph's own
nodes (issue 15's 4 × LSTM fp32 exact row: eager 2.044 ms against 1.918 in a graph).

rnncc replays a recorded call from a graph (call_graphs.py) by copying x into the graph's
input with a torch copy, launching the graph and copying each output into a new tensor:
three torch operations around the launch, and the input's copy and the launch both on the
path of a drained call's GPU (replay_host_parts.py: the GPU idles ~55–130 µs of host time
before the graph starts). Here the copies are captured into the graph: a memcpy node from a
placeholder into the graph's input first, and one from each output into a placeholder
last. A call then allocates its outputs (torch.empty), points the memcpy nodes at x and at
them (cudaGraphExecMemcpyNodeSetParams1D, through libcudart by ctypes) and launches the
graph: no torch copy, one launch. Timed as `rnncc bench` times eager calls
(timing.time_interleaved, settle=1), interleaved with the call as rnncc runs it, beside
the graph's replays back to back; its outputs checked against rnncc's.

    python3 benchmarks/replay_node_params.py [--case cell,dtype,H,B,S,layers ...] > benchmarks/results/replay-node-params-<gpu>-<date>.txt
"""
from __future__ import annotations

import argparse
import ctypes

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

import rnncc
from rnncc.timing import time_graph, time_interleaved

CASES = ["lstm,float32,512,8,256,4", "lstm,float16,1024,8,256,4", "lstm,float16,512,8,256,8",
         "lstm,float16,512,8,256,1"]
REPEATS = 60
MEMCPY_NODE = 1          # cudaGraphNodeTypeMemcpy
DEVICE_TO_DEVICE = 3     # cudaMemcpyDeviceToDevice


def cudart() -> ctypes.CDLL:
    """The CUDA runtime torch loaded (found in this process's mappings)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    if not paths:
        raise RuntimeError("no libcudart in this process")
    return ctypes.CDLL(sorted(paths)[0])


class _PitchedPtr(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("pitch", ctypes.c_size_t), ("xsize", ctypes.c_size_t),
                ("ysize", ctypes.c_size_t)]


class _Pos(ctypes.Structure):
    _fields_ = [("x", ctypes.c_size_t), ("y", ctypes.c_size_t), ("z", ctypes.c_size_t)]


class _Memcpy3DParms(ctypes.Structure):
    """cudaMemcpy3DParms."""
    _fields_ = [("srcArray", ctypes.c_void_p), ("srcPos", _Pos), ("srcPtr", _PitchedPtr),
                ("dstArray", ctypes.c_void_p), ("dstPos", _Pos), ("dstPtr", _PitchedPtr),
                ("extent", _Pos), ("kind", ctypes.c_int)]


class NodeCopies:
    """A call captured with its copies in the graph; ``__call__(x)`` points the input's
    memcpy node at x and each output's at a new tensor, then launches."""

    def __init__(self, fn, x: torch.Tensor):
        self.rt = cudart()
        self.rt.cudaGraphExecMemcpyNodeSetParams1D.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.rt.cudaGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.placeholder_in = x.clone()
        self.static_in = torch.empty_like(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up, as a capture asks
            for _ in range(2):
                fn(x)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(self.graph):
            self.static_in.copy_(self.placeholder_in)
            outs, self.spec = tree_flatten(fn(self.static_in))
            self.placeholders_out = [torch.empty_like(o) for o in outs]
            for p, o in zip(self.placeholders_out, outs):
                p.copy_(o)
        self.graph.instantiate()
        self.exec = ctypes.c_void_p(self.graph.raw_cuda_graph_exec())
        self.node_in, nodes_out = self._find_nodes()
        # Each output node: the graph's own buffer it reads (fixed at capture), and what a
        # new tensor for it is.
        self.outs = [(node, source, p.shape, p.dtype, p.nbytes)
                     for (node, source), p in zip(nodes_out, self.placeholders_out)]

    def _find_nodes(self):
        """The memcpy node whose source is the input's placeholder, and (node, source) of
        each whose destination is an output's (by the addresses the capture gave them)."""
        raw = ctypes.c_void_p(self.graph.raw_cuda_graph())
        count = ctypes.c_size_t(0)
        check(self.rt.cudaGraphGetNodes(raw, None, ctypes.byref(count)), "cudaGraphGetNodes")
        nodes = (ctypes.c_void_p * count.value)()
        check(self.rt.cudaGraphGetNodes(raw, nodes, ctypes.byref(count)), "cudaGraphGetNodes")
        node_in, nodes_out = None, {}
        dsts = {p.data_ptr(): i for i, p in enumerate(self.placeholders_out)}
        for node in nodes:
            kind = ctypes.c_int()
            check(self.rt.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "cudaGraphNodeGetType")
            if kind.value != MEMCPY_NODE:
                continue
            params = _Memcpy3DParms()
            check(self.rt.cudaGraphMemcpyNodeGetParams(ctypes.c_void_p(node), ctypes.byref(params)),
                  "cudaGraphMemcpyNodeGetParams")
            src, dst = params.srcPtr.ptr or 0, params.dstPtr.ptr or 0
            if src == self.placeholder_in.data_ptr() and dst == self.static_in.data_ptr():
                node_in = node
            elif dst in dsts:
                nodes_out[dsts[dst]] = (node, src)
        if node_in is None or len(nodes_out) != len(self.placeholders_out):
            raise RuntimeError(f"memcpy nodes not found: input {node_in is not None}, "
                               f"outputs {len(nodes_out)} of {len(self.placeholders_out)}")
        return node_in, [nodes_out[i] for i in range(len(self.placeholders_out))]

    def __call__(self, x: torch.Tensor):
        set_params = self.rt.cudaGraphExecMemcpyNodeSetParams1D
        err = set_params(self.exec, self.node_in, self.static_in.data_ptr(), x.data_ptr(), x.nbytes,
                         DEVICE_TO_DEVICE)
        outs = []
        for node, source, shape, dtype, nbytes in self.outs:
            o = torch.empty(shape, dtype=dtype, device="cuda")
            err |= set_params(self.exec, node, o.data_ptr(), source, nbytes, DEVICE_TO_DEVICE)
            outs.append(o)
        if err:
            raise RuntimeError(f"cudaGraphExecMemcpyNodeSetParams1D: error {err}")
        check(self.rt.cudaGraphLaunch(self.exec, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
              "cudaGraphLaunch")
        return tree_unflatten(outs, self.spec)


def check(err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what}: cudaError {err}")


def measure(case: str) -> list[str]:
    cell, dtype, H, B, S, L = case.split(",")
    H, B, S, L = int(H), int(B), int(S), int(L)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H, num_layers=L).to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
    inputs = [torch.randn(S, B, H, device="cuda", dtype=tdt) for _ in range(3)]
    with torch.no_grad():
        nodes = NodeCopies(compiled, inputs[0])
        differ = 0.0  # from rnncc's own call on the same inputs, every output
        for x in inputs:
            ours, theirs = tree_flatten(nodes(x))[0], tree_flatten(compiled(x))[0]
            differ = max([differ] + [float((a.float() - b.float()).abs().max()) for a, b in zip(ours, theirs)])
        turn = iter(range(10**9))
        timed = time_interleaved({"rnncc": lambda: compiled(inputs[next(turn) % 3]),
                                  "node copies": lambda: nodes(inputs[next(turn) % 3])}, 3, REPEATS, settle=1)
        graph = time_graph(lambda: compiled(inputs[0]), 3, 30).median_ms
    return [f"== {L} x {cell} {dtype} H={H} B={B} S={S} ({compiled.plan.schedule.value.label}): eager µs "
            + ", ".join(f"{k} {t.median_ms * 1e3:.1f} ({t.min_ms * 1e3:.1f}-{t.max_ms * 1e3:.1f})"
                        for k, t in timed.items())
            + f"; graph replayed back to back {graph * 1e3:.1f}; over it: "
            + ", ".join(f"{k} {(t.median_ms - graph) * 1e3:+.1f}" for k, t in timed.items())
            + f"; outputs within {differ:.1e} of rnncc's"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="cell,dtype,H,B,S,layers")
    args = parser.parse_args()
    print(f"# benchmarks/replay_node_params.py, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    cases = args.case or CASES
    for case in cases + cases[:1]:  # the first again: the first case of a process runs on a colder host
        print("\n".join(measure(case)), flush=True)


if __name__ == "__main__":
    main()
