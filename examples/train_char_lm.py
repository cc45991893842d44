"""A character-level language model on the opening of *Alice's Adventures in Wonderland*
(examples/data/alice_chapter1.txt, public domain), trained twice from the same start:
once with its ``torch.nn.LSTM``, once with ``rnncc.optimize()``'s twin in its place. Same
weights, batches and optimizer; the two loss curves, the time per epoch and a sample of
each model's text are printed (an epoch's time: the median after the first, which also
compiles and captures), and the curves written as JSON and, with matplotlib, a PNG.

On the CPU the twin's forward and backward are the float64 reference's
(``rnncc.reference_grad``), with dropout between layers as torch.nn applies it (so with
dropout the two curves differ by their masks' noise; with ``--dropout 0`` they agree to
float32 rounding). On CUDA (``--device cuda``) they are rnncc's kernels: the compiled
forward and the backward of ``rnncc.backward``; with dropout the twin runs one layer at a
time, each past the first reading the one before times a mask from torch's CUDA
generator (cuDNN draws its own masks, so the curves differ by their noise there too).

    python3 examples/train_char_lm.py                       # CPU, 60 epochs, under a minute
    python3 examples/train_char_lm.py --dropout 0 --epochs 5 -o /tmp/lm
    python3 examples/train_char_lm.py --device cuda --dropout 0 -o /tmp/lm-gpu
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch

import rnncc

TEXT = Path(__file__).resolve().parent / "data" / "alice_chapter1.txt"


class CharLM(torch.nn.Module):
    """Embedding → stacked LSTM → linear: next-character logits [S, B, vocabulary]."""

    def __init__(self, vocabulary: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, 32)
        self.lstm = torch.nn.LSTM(32, hidden, num_layers=layers, dropout=dropout)
        self.head = torch.nn.Linear(hidden, vocabulary)

    def forward(self, chars: torch.Tensor, state=None):
        y, state = self.lstm(self.embed(chars), state)
        return self.head(y), state


def batch_starts(text_length: int, seq: int, batch: int, epochs: int, seed: int) -> list[torch.Tensor]:
    """Each training step's B start offsets, the same list for both models."""
    g = torch.Generator().manual_seed(seed)
    steps = max(1, (text_length - 1) // (seq * batch))
    return [torch.randint(0, text_length - seq - 1, (batch,), generator=g) for _ in range(epochs * steps)]


def train(model: CharLM, data: torch.Tensor, starts: list[torch.Tensor], seq: int, epochs: int,
          lr: float) -> tuple[list[float], list[float]]:
    """(the loss of every step, the seconds of every epoch; on CUDA each epoch ends with
    the GPU drained, as every step's loss.item() drains it)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses, seconds = [], []
    per_epoch = len(starts) // epochs
    offsets = torch.arange(seq, device=data.device)
    for epoch in range(epochs):
        began = time.perf_counter()
        for s in starts[epoch * per_epoch:(epoch + 1) * per_epoch]:
            losses.append(train_step(model, optimizer, data, s, offsets))
        seconds.append(time.perf_counter() - began)
    return losses, seconds


def train_step(model: CharLM, optimizer: torch.optim.Optimizer, data: torch.Tensor, start: torch.Tensor,
               offsets: torch.Tensor) -> float:
    """One step on the B sequences beginning at ``start`` (``offsets``: 0 … S − 1 on the
    data's device): the next character's cross-entropy, its gradients and the optimizer's
    step; the loss, read back (which drains the GPU)."""
    index = start.to(data.device)[None, :] + offsets[:, None]  # [S, B]
    logits, _ = model(data[index])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), data[index + 1].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def steady_epoch(seconds: list[float]) -> float:
    """The median epoch after the first: the first also compiles rnncc's kernels and captures
    its graphs (and warms cuDNN), seconds that a mean over a short run would spread over
    every epoch."""
    return statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]


@torch.no_grad()
def sample(model: CharLM, alphabet: str, prompt: str, length: int) -> str:
    """Greedy continuation of ``prompt``."""
    model.eval()
    device = next(model.parameters()).device
    chars = torch.tensor([[alphabet.index(c)] for c in prompt], device=device)
    logits, state = model(chars)
    out = prompt
    for _ in range(length):
        nxt = int(logits[-1, 0].argmax())
        out += alphabet[nxt]
        logits, state = model(torch.tensor([[nxt]], device=device), state)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("-o", "--output", default="benchmarks/results/train-char-lm-cpu",
                   help="path prefix of the JSON and PNG written")
    args = p.parse_args()

    text = TEXT.read_text()
    alphabet = "".join(sorted(set(text)))
    data = torch.tensor([alphabet.index(c) for c in text], device=args.device)
    torch.manual_seed(args.seed)
    start = CharLM(len(alphabet), args.hidden, args.layers, args.dropout).to(args.device)
    models = {"torch.nn": copy.deepcopy(start), "rnncc": rnncc.optimize(copy.deepcopy(start))}
    starts = batch_starts(len(text), args.seq, args.batch, args.epochs, args.seed)
    curves, times = {}, {}
    for name, model in models.items():
        torch.manual_seed(args.seed + 1)  # the dropout masks' generator, the same start each
        curves[name], times[name] = train(model, data, starts, args.seq, args.epochs, args.lr)
        print(f"{name:8s}: loss {curves[name][0]:.3f} → {curves[name][-1]:.3f} over {len(curves[name])} steps; "
              f"{steady_epoch(times[name]) * 1e3:.1f} ms an epoch after the first (median), "
              f"the first {times[name][0] * 1e3:.0f} ms ({args.device})", flush=True)
    gap = max(abs(a - b) for a, b in zip(curves["torch.nn"], curves["rnncc"]))
    last = {n: sum(c[-len(c) // args.epochs:]) / (len(c) // args.epochs) for n, c in curves.items()}
    print(f"largest gap between the curves: {gap:.4f}; last epoch's mean loss: torch.nn "
          f"{last['torch.nn']:.4f}, rnncc {last['rnncc']:.4f}")
    for name, model in models.items():
        print(f"{name:8s} writes: {sample(model, alphabet, 'Alice ', 60)!r}")

    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    record = {"task": "character-level LM, examples/data/alice_chapter1.txt", "device": device,
              "args": vars(args), "torch": torch.__version__, "loss": curves, "seconds_per_epoch": times,
              "median_seconds_per_epoch_after_the_first": {n: steady_epoch(t) for n, t in times.items()},
              "largest_gap": gap, "last_epoch_mean_loss": last}
    out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    print(f"wrote {out.with_suffix('.json')}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, curve in curves.items():
        ax.plot(curve, label=f"{name} ({steady_epoch(times[name]) * 1e3:.1f} ms an epoch after the first)",
                linewidth=1.2, alpha=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title(f"char LM, {args.layers}×LSTM H={args.hidden}, dropout {args.dropout}, {args.device}: "
                 f"torch.nn vs rnncc.optimize()")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print(f"wrote {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
