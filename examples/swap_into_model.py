"""A small tagger (embedding → 2-layer LSTM → linear) made faster in one line.

    python examples/swap_into_model.py

rnncc.optimize swaps the nn.LSTM for rnncc.nn.LSTM with the same weights and leaves the
rest alone. On a GPU the copy runs rnncc's kernels; on a machine without one it runs
rnncc's reference executor (a warned slow path), so the script runs anywhere.
"""

import copy
import time

import torch

import rnncc


class Tagger(torch.nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 128, hidden: int = 256, tags: int = 17):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.lstm = torch.nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(hidden, tags)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.out(h)


def timed(model, tokens, repeats: int) -> tuple[torch.Tensor, float]:
    model(tokens)  # warm-up (and, for rnncc, the compile)
    if tokens.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        y = model(tokens)
    if tokens.is_cuda:
        torch.cuda.synchronize()
    return y, (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # Exact float32 on both sides (PyTorch's cuDNN RNNs use TF32 by default).
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    model = Tagger().to(device).eval()
    fast = rnncc.optimize(copy.deepcopy(model))  # prints what it replaced
    tokens = torch.randint(0, 1000, (8, 64), device=device)  # batch 8, 64 tokens
    repeats = 20 if device == "cuda" else 2
    with torch.inference_mode():
        want, t_torch = timed(model, tokens, repeats)
        got, t_rnncc = timed(fast, tokens, repeats)
    diff = ((got - want).abs().max() / want.abs().max()).item()
    print(f"device {device}: torch.nn {t_torch:.2f} ms, rnncc {t_rnncc:.2f} ms a forward "
          f"(batch 8, 64 tokens)")
    print(f"max relative difference {diff:.2e}")
    assert diff <= 1e-5, diff


if __name__ == "__main__":
    main()
