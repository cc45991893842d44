"""One training step of rnncc's twin captured in a CUDA graph and replayed under
torch.profiler: every kernel's start, duration and stream from the step's first kernel, so
that what runs beside what shows (the backward's weight gradients on side streams,
backward.side_streams), and the step's span against the sum of its kernels. One layer or
a stack, no dropout; the step is the bench's: the forward and torch.autograd.grad of the
input and every parameter from one output gradient.

    python3 benchmarks/training_trace.py CELL,DTYPE,H,B,S[,LAYERS] ...   (a GPU)
"""
import sys

import torch
from backward_profile import training_case  # benchmarks/ is this script's directory
from torch.profiler import ProfilerActivity, profile

from rnncc.bench import Config


def main() -> None:
    for arg in sys.argv[1:]:
        cell, dtype, *sizes = arg.split(",")
        H, B, S, layers = (int(v) for v in (sizes + ["1"])[:4])
        _, twin, x, dy = training_case(Config(cell, dtype, H, B, seq_len=S, layers=layers,
                                              passes="forward+backward"))
        params = list(twin.parameters())

        def step():
            return torch.autograd.grad(twin(x)[0], [x, *params], dy)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture: compiled, weights sent
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                        key=lambda e: e.time_range.start)
        t0 = events[0].time_range.start
        end = max(e.time_range.end for e in events)
        busy = sum(e.time_range.elapsed_us() for e in events)
        print(f"== {layers} × {cell} {dtype} H={H} B={B} S={S}: span {(end - t0) / 1e3:.3f} ms, "
              f"kernels {busy / 1e3:.3f} ms summed, {len(events)} kernels")
        streams = {}
        for e in events:
            stream = streams.setdefault(getattr(e, "device_resource_id", 0), len(streams))
            print(f"  {e.time_range.start - t0:9.1f} µs + {e.time_range.elapsed_us():8.1f}  s{stream}  {e.name[:90]}")


if __name__ == "__main__":
    main()
