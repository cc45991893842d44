"""A NumPy transcription of wavefront_f16.cu's index math for one layer (its fragment
loads, h's staging, the two halves of K meeting, the gate rows, the cells, the projection
of P steps a phase), with mma.sync m16n8k16's fragment layout as the PTX ISA gives it,
against wavefront_f16.py's float64 reference. A CPU check of the kernel's indexing before
device time is spent on it (SPREAD changes only when the projection's slices run, not
their indexing). Written 2026-11-28, when the kernel had not run: S=3, P=2 (a partial
phase) matched the reference exactly (h rounded to fp16 in both), in ~20 s.

    python3 benchmarks/wavefront_f16_emulate.py
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

# wavefront_f16.py's fragments() and reference(); CuPy, which they do not use, stubbed.
_PATH = Path(__file__).with_name("wavefront_f16.py")
sys.modules.setdefault("cupy", types.ModuleType("cupy"))
wf = types.ModuleType("wavefront_f16")
wf.__file__ = str(_PATH)
exec(compile(_PATH.read_text(), str(_PATH), "exec"), wf.__dict__)

H, B, G, UNITS = wf.H, wf.B, wf.G, wf.UNITS
BLOCKS, M_TILES, WARPS = H // UNITS, G * UNITS // 16, 16
KSTEPS, KSTEPS_ALL, HP, GH = H // 2 // 16, H // 16, H + 8, G * H


def mma(a: np.ndarray, b0: np.ndarray, b1: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One warp's mma.sync m16n8k16 (row.col): a [32 lanes][8 halves], b0 and b1 [32][2],
    c [32][4]; lane l = 4·g + q holds A rows g, g + 8 at K 2q, 2q + 1, 2q + 8, 2q + 9 (a0 … a3),
    B column g at K 2q, 2q + 1 (b0) and 2q + 8, 2q + 9 (b1), and D rows g, g + 8 at columns
    2q, 2q + 1."""
    A, Bm = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, q = lane // 4, lane % 4
        at = [(g, 2 * q), (g, 2 * q + 1), (g + 8, 2 * q), (g + 8, 2 * q + 1),
              (g, 2 * q + 8), (g, 2 * q + 9), (g + 8, 2 * q + 8), (g + 8, 2 * q + 9)]
        for e, (r, k) in enumerate(at):
            A[r, k] = a[lane][e]
        Bm[2 * q:2 * q + 2, g] = b0[lane]
        Bm[2 * q + 8:2 * q + 10, g] = b1[lane]
    D = A @ Bm
    out = c.copy()
    for lane in range(32):
        g, q = lane // 4, lane % 4
        out[lane] += [D[g, 2 * q], D[g, 2 * q + 1], D[g + 8, 2 * q], D[g + 8, 2 * q + 1]]
    return out


def b_fragments(rows: np.ndarray, k0: int) -> tuple[np.ndarray, np.ndarray]:
    """B fragments of K pairs k0 + 2q and k0 + 2q + 8 from rows[g] (lane 4g + q)."""
    b0, b1 = np.zeros((32, 2)), np.zeros((32, 2))
    for lane in range(32):
        g, q = lane // 4, lane % 4
        b0[lane] = rows[g][k0 + 2 * q:k0 + 2 * q + 2]
        b1[lane] = rows[g][k0 + 2 * q + 8:k0 + 2 * q + 10]
    return b0, b1


def project(x, f_ih, bias, xp, t0: int, n: int, P: int) -> None:
    """The projection phase of steps t0 … t0 + n − 1, as every block's warps run it."""
    for blk in range(BLOCKS):
        row0 = G * blk * UNITS
        for warp in range(WARPS):
            mt, half = warp % M_TILES, warp // M_TILES
            j0 = half * (P // 2)
            acc = np.zeros((P // 2, 32, 4))
            for ks in range(KSTEPS_ALL):
                for j in range(P // 2):
                    if j0 + j < n:  # x + ((t0 + j0 + j)·B + grp)·H + ks·16 + 2·quad
                        acc[j] = mma(f_ih[blk, mt, ks], *b_fragments(x[t0 + j0 + j], ks * 16), acc[j])
            for j in range(P // 2):
                if j0 + j >= n:
                    break
                for lane in range(32):
                    g, q = lane // 4, lane % 4
                    for i in range(4):
                        r, b = row0 + mt * 16 + g + 8 * (i >> 1), 2 * q + (i & 1)
                        xp[t0 + j0 + j, b, r] = acc[j][lane][i] + bias[r]


def layer(x, w_ih, w_hh, bias, S: int, P: int) -> np.ndarray:
    f_ih, f_hh = wf.fragments(w_ih).astype(np.float64), wf.fragments(w_hh).astype(np.float64)
    y, xp, c = np.zeros((S, B, H)), np.zeros((S, B, GH)), np.zeros((BLOCKS, B * UNITS))
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    for t in range(S):
        if t % P == 0:
            project(x, f_ih, bias, xp, t, min(P, S - t), P)
        for blk in range(BLOCKS):
            u0 = blk * UNITS
            row0 = G * u0
            h_s = np.zeros((B, HP))
            if t > 0:  # h_s + r·HP + col ← y[t − 1] + r·H + col
                for e in range(B * H // 8):
                    r, col = e // (H // 8), e % (H // 8) * 8
                    h_s[r, col:col + 8] = y[t - 1, r, col:col + 8]
            sums = {}
            for warp in range(WARPS):
                mt, half = warp % M_TILES, warp // M_TILES
                acc = np.zeros((32, 4))
                if t > 0:  # hb = h_s + grp·HP + half·(H/2) + 2·quad, k-step ks at hb + 16·ks
                    for ks in range(KSTEPS):
                        acc = mma(f_hh[blk, mt, half * KSTEPS + ks],
                                  *b_fragments(h_s, half * (H // 2) + ks * 16), acc)
                sums[warp] = acc
            gates = np.zeros((G * UNITS, B))
            for mt in range(M_TILES):
                low, high = sums[mt], sums[mt + M_TILES]
                for lane in range(32):
                    g, q = lane // 4, lane % 4
                    r, b = mt * 16 + g, 2 * q
                    gates[r, b], gates[r, b + 1] = low[lane][0] + high[lane][0], low[lane][1] + high[lane][1]
                    gates[r + 8, b], gates[r + 8, b + 1] = low[lane][2] + high[lane][2], low[lane][3] + high[lane][3]
            for tid in range(B * UNITS):
                cb, cu = tid // UNITS, tid % UNITS
                pre = xp[t, cb, row0 + G * cu:row0 + G * cu + G]
                i, f = sig(gates[G * cu, cb] + pre[0]), sig(gates[G * cu + 1, cb] + pre[1])
                g_, o = np.tanh(gates[G * cu + 2, cb] + pre[2]), sig(gates[G * cu + 3, cb] + pre[3])
                c[blk, tid] = f * c[blk, tid] + i * g_
                y[t, cb, u0 + cu] = np.float16(o * np.tanh(c[blk, tid]))
    return y


def main() -> None:
    rng = np.random.default_rng(0)
    S, P, bound = 3, 2, 1.0 / H ** 0.5
    w_ih = rng.uniform(-bound, bound, (GH, H)).astype(np.float16)
    w_hh = rng.uniform(-bound, bound, (GH, H)).astype(np.float16)
    bias = rng.uniform(-bound, bound, GH).astype(np.float32)
    x = rng.uniform(-1, 1, (S, B, H)).astype(np.float16)
    got = layer(x.astype(np.float64), w_ih, w_hh, bias.astype(np.float64), S, P)
    want = wf.reference(x.astype(np.float64), [w_ih.astype(np.float64)], [w_hh.astype(np.float64)],
                        [bias.astype(np.float64)])
    print(f"S={S} P={P}: the transcription's h within {np.abs(got - want).max() / np.abs(want).max():.1e} "
          "of the float64 reference")


if __name__ == "__main__":
    main()
