"""Compile a torch.nn.LSTM with rnncc and call it on CUDA tensors beside the module.

    python examples/torch_lstm.py            # needs an NVIDIA GPU, PyTorch and PyCUDA
"""

import torch

import rnncc
from rnncc.dtypes import DTYPES, max_relative_error


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False  # compare exact float32 with exact float32
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(input_size=256, hidden_size=512, num_layers=2, batch_first=True).cuda().eval()

    model, weights = rnncc.from_torch(lstm)           # spec + weights, layers l0, l1
    compiled = rnncc.compile(model, weights=weights, batch=16, seq_len=100)
    print(compiled.explain())

    x = torch.randn(16, 100, 256, device="cuda")      # [B, S, I]
    h0 = torch.randn(2, 16, 512, device="cuda")
    c0 = torch.randn(2, 16, 512, device="cuda")
    with torch.no_grad():
        want, (h_n, c_n) = lstm(x, (h0, c0))

    state = {f"l{i}": (h0[i], c0[i]) for i in range(2)}   # per layer, like PyTorch's (h, c)
    y, final = compiled(x, state, batch_first=True)        # zero-copy on the CUDA tensors
    torch.cuda.synchronize()

    tol = DTYPES["float32"].tolerance
    errors = {"output": max_relative_error(y.cpu().numpy(), want.cpu().numpy())}
    for i in range(2):
        errors[f"l{i} h_n"] = max_relative_error(final[f"l{i}"][0].cpu().numpy(), h_n[i].cpu().numpy())
        errors[f"l{i} c_n"] = max_relative_error(final[f"l{i}"][1].cpu().numpy(), c_n[i].cpu().numpy())
    for name, err in errors.items():
        print(f"max relative error vs torch.nn.LSTM, {name}: {err:.2e}")
    worst = max(errors.values())
    print(f"{'OK' if worst <= tol else 'FAIL'}: worst {worst:.2e}, tolerance {tol:.0e} (float32)")
    if worst > tol:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
