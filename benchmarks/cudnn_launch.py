"""One cuDNN LSTM forward at each case given, for Nsight Compute to read the launch of its
persistent kernel (grid, block, registers, shared memory) beside rnncc's grid kernel's:

    ncu --kernel-name regex:lstm --section LaunchStats --section Occupancy \\
        python3 benchmarks/cudnn_launch.py lstm,float16,1024,16 lstm,float16,1024,8

(cell,dtype,H,B; S=64). Needs a GPU.
"""
import sys

import torch

if __name__ == "__main__":
    for case in sys.argv[1:]:
        cell, dtype, H, B = case.split(",")
        torch.manual_seed(0)
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](int(H), int(H)).to("cuda", getattr(torch, dtype))
        x = torch.randn(64, int(B), int(H), device="cuda", dtype=getattr(torch, dtype))
        with torch.no_grad():
            module(x)
        torch.cuda.synchronize()
        print(f"ran {case}", flush=True)
