"""A NumPy transcription of wavefront_f16.cu's index math for one layer (its fragment
loads, h's staging, the two halves of K meeting, the gate rows, the cells and their second
store of h in B-fragment order, the projection of P steps a phase in both forms), with mma.sync m16n8k16's fragment layout as the PTX ISA gives it,
against wavefront_f16.py's float64 reference. A CPU check of the kernel's indexing before
device time is spent on it (SPREAD changes only when the projection's slices run, not
their indexing; X_STAGED reads the same fragments from a copy in shared memory, checked
only on the GPU, against float64). S=3, P=2 (a partial phase) matches the reference exactly (h rounded to
fp16 in both), ~20 s a form.

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


def row_fragments(rows: np.ndarray, k0: int) -> tuple[np.ndarray, np.ndarray]:
    """B fragments of K pairs k0 + 2q and k0 + 2q + 8 from rows[g] (lane 4g + q)."""
    b0, b1 = np.zeros((32, 2)), np.zeros((32, 2))
    for lane in range(32):
        g, q = lane // 4, lane % 4
        b0[lane] = rows[g][k0 + 2 * q:k0 + 2 * q + 2]
        b1[lane] = rows[g][k0 + 2 * q + 8:k0 + 2 * q + 10]
    return b0, b1


def project(xf, f_ih, bias, xp, t0: int, n: int, P: int, k_halves: bool) -> None:
    """The projection phase of steps t0 … t0 + n − 1, as every block's warps run it: x's B
    fragments read from xf (the kernel's xf[(t·K/16 + ks)·32 + lane], a uint2: halves 0, 1
    are b0, halves 2, 3 b1). A warp sums over all of K for half of the steps, or with
    ``k_halves`` over its half of K for all of them into its half of xp [2][S][B][GH]
    (the bias in the lower half only)."""
    nj = P if k_halves else P // 2
    for blk in range(BLOCKS):
        row0 = G * blk * UNITS
        for warp in range(WARPS):
            mt, half = warp % M_TILES, warp // M_TILES
            j0 = 0 if k_halves else half * nj
            steps = range(half * KSTEPS_ALL // 2, (half + 1) * KSTEPS_ALL // 2) if k_halves else range(KSTEPS_ALL)
            acc = np.zeros((nj, 32, 4))
            for ks in steps:
                for j in range(nj):
                    if j0 + j < n:
                        v = xf[t0 + j0 + j, ks]
                        acc[j] = mma(f_ih[blk, mt, ks], v[:, 0:2], v[:, 2:4], acc[j])
            out = xp[half] if k_halves else xp[0]
            adds_bias = half == 0 or not k_halves
            for j in range(nj):
                if j0 + j >= n:
                    break
                for lane in range(32):
                    g, q = lane // 4, lane % 4
                    for i in range(4):
                        r, b = row0 + mt * 16 + g + 8 * (i >> 1), 2 * q + (i & 1)
                        out[t0 + j0 + j, b, r] = acc[j][lane][i] + (bias[r] if adds_bias else 0.0)


def layer(xf, w_ih, w_hh, bias, S: int, P: int, k_halves: bool) -> tuple[np.ndarray, np.ndarray]:
    """(y, yf): h of every step as rows and as the kernel's cells store it for the layer
    above, in B-fragment order [S][K/16][32][4]."""
    f_ih, f_hh = wf.fragments(w_ih).astype(np.float64), wf.fragments(w_hh).astype(np.float64)
    y, xp, c = np.zeros((S, B, H)), np.zeros((2, S, B, GH)), np.zeros((BLOCKS, B * UNITS))
    yf = np.full((S, H // 16, 32, 4), np.nan)
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    for t in range(S):
        if t % P == 0:
            project(xf, f_ih, bias, xp, t, min(P, S - t), P, k_halves)
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
                                  *row_fragments(h_s, half * (H // 2) + ks * 16), acc)
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
                pre = xp[0, t, cb, row0 + G * cu:row0 + G * cu + G] + xp[1, t, cb, row0 + G * cu:row0 + G * cu + G]
                i, f = sig(gates[G * cu, cb] + pre[0]), sig(gates[G * cu + 1, cb] + pre[1])
                g_, o = np.tanh(gates[G * cu + 2, cb] + pre[2]), sig(gates[G * cu + 3, cb] + pre[3])
                c[blk, tid] = f * c[blk, tid] + i * g_
                y[t, cb, u0 + cu] = np.float16(o * np.tanh(c[blk, tid]))
                k = u0 + cu  # yf[((t·K/16 + k/16)·32 + 4·cb + k%16%8/2)·4 + k%16/8·2 + k%2]
                yf[t, k // 16, 4 * cb + k % 16 % 8 // 2, k % 16 // 8 * 2 + k % 2] = y[t, cb, u0 + cu]
    return y, yf


def main() -> None:
    rng = np.random.default_rng(0)
    S, P, bound = 3, 2, 1.0 / H ** 0.5
    w_ih = rng.uniform(-bound, bound, (GH, H)).astype(np.float16)
    w_hh = rng.uniform(-bound, bound, (GH, H)).astype(np.float16)
    bias = rng.uniform(-bound, bound, GH).astype(np.float32)
    x = rng.uniform(-1, 1, (S, B, H)).astype(np.float16)
    want = wf.reference(x.astype(np.float64), [w_ih.astype(np.float64)], [w_hh.astype(np.float64)],
                        [bias.astype(np.float64)])
    xf = wf.b_fragments(x).astype(np.float64)
    for k_halves in (False, True):
        got, got_f = layer(xf, w_ih, w_hh, bias.astype(np.float64), S, P, k_halves)
        print(f"S={S} P={P}{' K_HALVES' if k_halves else ''}: the transcription's h within "
              f"{np.abs(got - want).max() / np.abs(want).max():.1e} of the float64 reference; its "
              f"yf {'equals' if np.array_equal(got_f, wf.b_fragments(got)) else 'differs from'} "
              "b_fragments(y)")


if __name__ == "__main__":
    main()
