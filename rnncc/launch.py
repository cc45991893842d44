"""Launch geometry and argument lists: pure functions of the plan, the kernel and the
call's shape and pointers, so that they are tested without a GPU.

Pointers are plain ints here (0 is nullptr). The runtime owns memory and streams; these
functions only say which grid each kernel gets and which value each parameter takes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .codegen import FOLDED_FIRST_STEP_THREADS, KernelSource
from .cublaslt import Matmul
from .errors import RuntimeCheckError
from .plan import LayerPlan
from .tiles import H_PROJECTION_BLOCK
from .weights import fragments_name

# Words of the grid barrier of a grid-persistent layer: arrivals, gave up, two of padding.
BARRIER_WORDS = 4
MAX_GRID_Y = 65535


@dataclass(frozen=True)
class Sequence:
    """Where a [S, B, F] tensor lives: its pointer, element size and strides (elements)."""

    ptr: int
    itemsize: int
    stride_t: int
    stride_b: int

    def at(self, t: int) -> int:
        """Pointer to step t."""
        return self.ptr + t * self.stride_t * self.itemsize

    def reversed(self, steps: int) -> "Sequence":
        """The same steps in reverse order (step t is step steps−1−t here): how a reverse
        layer's kernels, which count their steps up, walk its sequences down."""
        return Sequence(self.at(steps - 1), self.itemsize, -self.stride_t, self.stride_b)

    def columns(self, first: int) -> "Sequence":
        """The features from ``first`` on (a bidirectional layer's backward half)."""
        return Sequence(self.ptr + first * self.itemsize, self.itemsize, self.stride_t, self.stride_b)


def arguments(kernel: KernelSource, values: dict[str, int]) -> list[int]:
    """The kernel's arguments in its parameter order; a missing one is a bug in rnncc."""
    try:
        return [int(values[p.name]) for p in kernel.params]
    except KeyError as exc:
        raise RuntimeCheckError(f"launch of {kernel.name}: no value for parameter {exc.args[0]!r} "
                                f"(given: {', '.join(sorted(values))})") from None


def writes_h_n(kernel: KernelSource) -> bool:
    """Whether the recurrent kernel writes the call's h_n itself, given ``h_final`` (every
    step kernel, and the persistent ones with room in their registers: codegen.
    render_recurrent); else h_n is copied from the layer's last step after it."""
    return any(p.name == "h_final" for p in kernel.params)


def check_grid(kernel: KernelSource, grid: tuple[int, int]) -> tuple[int, int]:
    if grid[1] > MAX_GRID_Y:
        raise RuntimeCheckError(f"{kernel.name}: grid {grid} exceeds {MAX_GRID_Y} blocks in y; "
                                "the call is too large (split the sequence)")
    return grid


def projection_strides(layout: str, B: int, GH: int, rows: int) -> tuple[int, int, int]:
    """Elements between steps, batch entries and gate columns of the projection buffer:
    Y [rows, G·H] for "xw", Yᵀ [G·H, rows] for "wx" (row = step·B + b)."""
    return (B * GH, GH, 1) if layout == "xw" else (B, 1, rows)


def recurrent_projection(xproj: int, strides: tuple[int, int, int], steps: int,
                         reverse: bool) -> tuple[int, tuple[int, int, int]]:
    """(pointer, strides) of a chunk's projection (float32, its steps in time order) as its
    recurrent kernel reads it: as is, or for a reverse layer from its last step down."""
    if not reverse:
        return xproj, strides
    st, sb, sn = strides
    return xproj + (steps - 1) * st * 4, (-st, sb, sn)


def chunk_steps(t0: int, steps: int, S: int, reverse: bool) -> int:
    """First step, in time order, of the chunk of ``steps`` steps that a layer starts at its
    own step t0 (a reverse layer's step t is step S−1−t)."""
    return S - t0 - steps if reverse else t0


def projection_grid(l: LayerPlan, rows: int) -> tuple[int, int]:
    tile, GH = l.projection_tile.value, l.gates * l.hidden_size
    if tile.math == "rows":  # a warp tile.cols gate columns, a block a pass of tile.rows rows; any layout
        return math.ceil(GH / (tile.warps * tile.cols)), math.ceil(rows / tile.rows)
    if tile.math == "rows_tensor":  # a block m_rows gate columns × tile.rows rows; any layout
        return math.ceil(GH / tile.m_rows), math.ceil(rows / tile.rows)
    if l.layout.value == "xw":
        return math.ceil(GH / tile.bn), math.ceil(rows / tile.bm)
    return math.ceil(rows / tile.bn), math.ceil(GH / tile.bm)


def step_grid(l: LayerPlan, kernel: KernelSource, B: int) -> tuple[int, int]:
    """Grid of the per-step kernel: the cell kernel after cuBLASLt (a thread per unit and
    row), or the fused step kernel (its tile of units × rows, in either form)."""
    if l.persistence.value.math == "cublas":
        return math.ceil(l.hidden_size / kernel.block[0]), B
    st = l.step_tile.value
    return math.ceil(l.hidden_size / st.units_per_block), math.ceil(B / st.batch_per_block)


def persistent_grid(l: LayerPlan, B: int) -> tuple[int, int]:
    """Cluster mode: one cluster per batch tile (clusters are independent), after the rows of
    producer clusters of a layer that computes its projection in the launch. Grid mode: the
    planned blocks over units × batch blocks; a larger batch loops over tiles inside."""
    p = l.persistence.value
    if p.mode == "cluster":
        producers = l.projection_tile.value.producer_rows if l.projection_fused else 0
        return p.tile.cluster, producers + -(-B // p.tile.batch_per_block)
    return -(-l.hidden_size // p.tile.units_per_block), p.tile.batch_blocks


def _flags_per_launch(l: LayerPlan, S: int) -> int:
    return l.projection_tile.value.flags(min(l.unroll.value, S))


def sync_words(layers: Iterable[LayerPlan], S: int) -> tuple[dict[str, int], int]:
    """The words through which layers' kernels synchronise, zeroed once a call before its
    launches: a grid layer's barrier (BARRIER_WORDS), the chunk flags of a layer that
    computes its projection in its launch (one a chunk of each launch). (The word offset
    of each such layer, the total words.)"""
    offsets, n = {}, 0
    for l in layers:
        if l.persistence.value.mode == "grid":
            words = BARRIER_WORDS
        elif l.projection_fused:
            words = _flags_per_launch(l, S) * -(-S // min(l.unroll.value, S))
        else:
            continue
        offsets[l.name] = n
        n += words
    return offsets, n


def fused_projection_arguments(l: LayerPlan, *, t0: int, S: int, source: Sequence,
                               weights: dict[str, int], flags: int) -> dict[str, int]:
    """The producers' arguments of a launch that computes its own projection, starting at
    the layer's own step t0: its input walked in its step order, W_ih, the bias and this
    launch's flags (``flags``: the layer's first, sync_words)."""
    if not l.projection_fused:
        return {}
    x = source.reversed(S) if l.reverse else source
    args = {"proj_x": x.at(t0), "proj_x_stride_t": x.stride_t, "proj_x_stride_b": x.stride_b,
            "w_ih": weights["w_ih"],
            "projection_flags": flags + 4 * (t0 // l.unroll.value) * _flags_per_launch(l, S)}
    if l.bias:
        args["bias"] = weights["bias"]
    return args


def previous_h(t: int, h0: tuple[int, int] | None, y: Sequence) -> tuple[int, int]:
    """(pointer, batch stride) of h before step t: h0 (0 = zeros) at t = 0, else y[t-1]."""
    if t == 0:
        return h0 if h0 is not None else (0, 0)
    return y.at(t - 1), y.stride_b


def source_arguments(sources: Iterable[Sequence], t: int) -> dict[str, int]:
    """x0, x1, ... (pointers at step t) and their strides: a merge's or a layer's sources."""
    args = {}
    for i, s in enumerate(sources):
        args |= {f"x{i}": s.at(t), f"x{i}_stride_t": s.stride_t, f"x{i}_stride_b": s.stride_b}
    return args


@dataclass(frozen=True)
class Residual:
    """A residual layer's operands: its input's sources and its output (h + input)."""

    sources: tuple[Sequence, ...]
    out: Sequence

    def reversed(self, steps: int) -> "Residual":
        return Residual(tuple(s.reversed(steps) for s in self.sources), self.out.reversed(steps))

    def arguments(self, t: int) -> dict[str, int]:
        """The kernel's residual parameters, pointers at step t."""
        return source_arguments(self.sources, t) | {
            "residual_out": self.out.at(t), "residual_out_stride_t": self.out.stride_t,
            "residual_out_stride_b": self.out.stride_b}


@dataclass(frozen=True)
class Gates:
    """Where a training forward writes a layer's pre-activations (codegen.gates_params):
    dense float32 [S, B, G·H] in the order the layer runs its steps, ``h_part`` a GRU's
    h part (0 otherwise); ``row`` = B·G·H elements a step. ``NO_GATES``: none written."""

    ptr: int
    h_part: int
    row: int

    def arguments(self, t: int) -> dict[str, int]:
        """The kernel's gates parameters at the layer's own step t."""
        at = lambda p: p + t * self.row * 4 if p else 0  # noqa: E731
        return {"gates": at(self.ptr), "gates_h": at(self.h_part)}

    def pointers(self) -> tuple[int, ...]:
        """The buffers' pointers, the h part's only where there is one (a call's inputs)."""
        return (self.ptr, self.h_part) if self.h_part else (self.ptr,)


NO_GATES = Gates(0, 0, 0)


def length_arguments(l: LayerPlan, t: int, S: int, lengths: int) -> dict[str, int]:
    """The length parameters of a launch whose step 0 is the layer's own step t: the time
    of that step in the whole sequence (a reverse layer's step t is time S−1−t) and the
    direction its steps go; none where the call has no lengths (``lengths`` 0)."""
    if not lengths:
        return {}
    return {"lengths": lengths, "length_time": S - 1 - t if l.reverse else t,
            "length_dir": -1 if l.reverse else 1}


def persistent_arguments(l: LayerPlan, *, t0: int, steps: int, S: int, B: int, y: Sequence,
                         h0: tuple[int, int] | None, c0: int, c_out: int, cell: int,
                         xproj: int, xproj_strides: tuple[int, int, int], weights: dict[str, int],
                         barrier: int, status: int, spin_timeout_ns: int,
                         residual: Residual | None = None, lengths: int = 0,
                         gates: Gates = NO_GATES, source: Sequence | None = None,
                         h_final: int = 0, tensor_maps: int = 0) -> dict[str, int]:
    """Arguments of a persistent (grid or cluster) launch covering steps t0 .. t0+steps-1;
    y is the layer's h (for a residual layer not its output, which ``residual`` holds);
    ``h_final``: a dense [B, H] array the call's last step writes h into as well (h_n;
    0: none, h_n is then copied from y), given to the launch that ends the call;
    ``lengths``: the device array of each row's length (0: the call has none); ``gates``:
    where a training forward's kernel writes the pre-activations; ``barrier``: a grid
    layer's barrier, or the flags of a layer whose launch computes its projection from
    ``source``, its input (fused_projection_arguments); ``tensor_maps``: the workspace's
    slots where a kernel that copies by tensor maps makes its maps of y (0: it copies by
    cp.async), and its template's box rows (driver.tensor_map_template)."""
    h_prev, h_sb = previous_h(t0, h0, y)
    xp_t, xp_b, xp_n = xproj_strides
    args = {"h0": h_prev, "h0_stride_b": h_sb, "w_hh_t": weights["w_hh_t"],
            **recurrent_fragments(l, weights), "xproj_all": xproj, "xproj_stride_t": xp_t, "xproj_stride_b": xp_b,
            "xproj_stride_n": xp_n, "y": y.at(t0), "y_stride_t": y.stride_t,
            "y_stride_b": y.stride_b, "h_final": h_final if t0 + steps == S else 0,
            "steps": steps, "batch": B, "barrier": barrier,
            "status": status, "spin_timeout_ns": spin_timeout_ns,
            "bias_hn": weights.get("bias_hn", 0)}
    if l.cell == "lstm":
        args |= {"c0": c0, "c": cell, "c_final": c_out if t0 + steps == S else 0,
                 "first_chunk": int(t0 == 0)}
    if l.persistence.value.tensor_maps:
        args |= {"tensor_map_template": l.persistence.value.tile.batch_per_block, "tensor_map_slots": tensor_maps}
    if residual is not None:
        args |= residual.arguments(t0)
    args |= fused_projection_arguments(l, t0=t0, S=S, source=source, weights=weights, flags=barrier)
    return args | gates.arguments(t0) | length_arguments(l, t0, S, lengths)


def recurrent_fragments(l: LayerPlan, weights: dict[str, int]) -> dict[str, int]:
    """W_hh as a tensor-core persistent kernel holds it (plan.LayerPlan.fragments_tile; the
    runtime uploads it as weights.fragments_name), or nothing for other kernels. A folded
    LSTMP's recurrence is given its matrix's under the same name."""
    tile = l.fragments_tile
    return {} if tile is None else {"w_hh_fragments": weights[fragments_name(tile, l.hidden_size)]}


def step_arguments(l: LayerPlan, *, t: int, j: int, S: int, B: int, y: Sequence,
                   h0: tuple[int, int] | None, c0: int, c_out: int, cell: int, xproj: int,
                   xproj_strides: tuple[int, int, int], weights: dict[str, int],
                   step_product: int, residual: Residual | None = None,
                   lengths: int = 0, cell_output: int = 0, h_final: int = 0,
                   gates: Gates = NO_GATES, library_h: int = 0) -> dict[str, int]:
    """Arguments of the step kernel for step t, the j-th of its projection chunk; a
    projected LSTM's writes r to ``cell_output`` [B, H] (its h projection writes y).
    ``h_final``: a dense [B, H] array the last step writes h into as well (h_n; 0: none,
    h_n is then copied from y). ``gates``: as persistent_arguments'. ``library_h``: the
    padded copy of h the cell kernel also writes (LayerPlan.library_padding; 0: none)."""
    h_prev, h_sb = previous_h(t, h0, y)
    xp_t, xp_b, xp_n = xproj_strides
    h_out, h_out_sb = (cell_output, l.hidden_size) if l.proj_size else (y.at(t), y.stride_b)
    args = {"h_prev": h_prev, "h_prev_stride_b": h_sb, "xproj": xproj + j * xp_t * 4,
            "xproj_stride_b": xp_b, "xproj_stride_n": xp_n, "h_out": h_out,
            "h_out_stride_b": h_out_sb, "h_final": h_final if t == S - 1 else 0,
            "batch": B, "w_hh_t": weights["w_hh_t"],
            "step_product": step_product if h_prev else 0, "bias_hn": weights.get("bias_hn", 0),
            "h_library": library_h}
    if "w_hh" in weights:  # the rows form's W_hh as stored (runtime uploads it for such plans)
        args["w_hh"] = weights["w_hh"]
    if l.cell == "lstm":
        args |= {"c0": c0, "c": cell, "c_out": c_out if t == S - 1 else 0,
                 "first_step": int(t == 0)}
    if residual is not None:
        args |= residual.arguments(t)
    return args | gates.arguments(t) | length_arguments(l, t, S, lengths)


def folded_first_step_grid(l: LayerPlan, B: int, phase: int = 0) -> tuple[int, int]:
    """A thread per gate column (phase 1: per feature of h) and row
    (codegen.FOLDED_FIRST_STEP_THREADS a block)."""
    width = l.proj_size if phase == 1 else l.gates * l.hidden_size
    return -(-width // FOLDED_FIRST_STEP_THREADS), B


def folded_first_step_arguments(l: LayerPlan, *, t0: int, steps: int, S: int, B: int, xproj: int,
                                xproj_strides: tuple[int, int, int], w_hh_t: int,
                                h0: tuple[int, int], lengths: int = 0) -> dict[str, int]:
    """Arguments of a folded layer's first-step term over the chunk of ``steps`` steps from
    its own step t0 (``xproj`` as its recurrent kernel reads it): h0·W_hhᵀ (W_hhᵀ as packed,
    [P, G·H]) added at each row's first step where it falls in the chunk."""
    xp_t, xp_b, xp_n = xproj_strides
    return {"xproj": xproj, "xproj_stride_t": xp_t, "xproj_stride_b": xp_b, "xproj_stride_n": xp_n,
            "w_hh_t": w_hh_t, "h0": h0[0], "h0_stride_b": h0[1], "batch": B, "seq_len": S,
            "steps": steps, "length_time": S - 1 - t0 if l.reverse else t0,
            "length_dir": -1 if l.reverse else 1, "lengths": lengths, "phase": 0, "y_last": 0,
            "y_last_stride_b": 0}


def folded_empty_rows_arguments(*, S: int, B: int, y: Sequence, w_hh_t: int, h0: tuple[int, int],
                                lengths: int) -> dict[str, int]:
    """Arguments of the first-step kernel's phase 1, after a folded layer's last chunk: h0
    as h at the layer's last step (y in its own step order) for rows of length 0."""
    return {"xproj": 0, "xproj_stride_t": 0, "xproj_stride_b": 0, "xproj_stride_n": 0,
            "w_hh_t": w_hh_t, "h0": h0[0], "h0_stride_b": h0[1], "batch": B, "seq_len": S,
            "steps": 0, "length_time": 0, "length_dir": 1, "lengths": lengths, "phase": 1,
            "y_last": y.at(S - 1), "y_last_stride_b": y.stride_b}


def folded_h_projection(l: LayerPlan, *, dtype: str, t0: int, steps: int, S: int, B: int,
                        r: Sequence, y: Sequence, w_hr: int,
                        scratch: int) -> tuple[Matmul, int, int, int]:
    """(GEMM, A, B, D) of a folded layer's h = r·W_hrᵀ over the chunk of ``steps`` steps from
    its own step t0: r and y in time order (not reversed), r dense [S, B, H]. Column-major,
    D [P, rows] = W_hr (stored [P, H], used transposed) · r [H, rows]; y's rows as one
    matrix where its steps are B rows apart, else a batch of ``steps`` GEMMs of B rows."""
    H, P = l.hidden_size, l.proj_size
    first = chunk_steps(t0, steps, S, l.reverse)  # its first step in time order
    dense = y.stride_t == B * y.stride_b
    g = Matmul(dtype, l.precision.value, m=P, n=steps * B if dense else B, k=H, transpose_a=True,
               lda=H, ldb=H, ldd=y.stride_b, batches=1 if dense else steps,
               stride_b=0 if dense else B * H, stride_d=0 if dense else y.stride_t,
               scratch=scratch, out_dtype=dtype)
    return g, w_hr, r.at(first), y.at(first)


def h_projection_grid(l: LayerPlan, B: int) -> tuple[int, int]:
    """Grid of a projected LSTM's h projection: blocks of a few features × rows rows."""
    return -(-l.proj_size // H_PROJECTION_BLOCK.features), -(-B // H_PROJECTION_BLOCK.rows)


def h_projection_arguments(l: LayerPlan, *, t: int, S: int, B: int, y: Sequence,
                           h0: tuple[int, int] | None, cell_output: int, weights: dict[str, int],
                           lengths: int = 0) -> dict[str, int]:
    """Arguments of a projected LSTM's h projection at step t: h = r·W_hrᵀ into y[t], r
    from ``cell_output``; with lengths, h before step t, which an ended row keeps."""
    args = {"r": cell_output, "w_hr": weights["w_hr"], "h_out": y.at(t),
            "h_out_stride_b": y.stride_b, "batch": B}
    if lengths:
        h_prev, h_sb = previous_h(t, h0, y)
        args |= {"h_prev": h_prev, "h_prev_stride_b": h_sb}
    return args | length_arguments(l, t, S, lengths)


def projection_weights(l: LayerPlan) -> str:
    """The device weights layer l's projection kernel reads as W_ih: "w_ih_rows" (a copy
    whose rows are padded with zeros to whole 16-byte loads) where a rows kernel or the
    tiled kernel on tensor cores reads rows wider than K, else "w_ih"."""
    tile = l.projection_tile.value
    padded = (tile.math in ("rows", "rows_tensor") and tile.row_stride != l.input_size) or \
        (tile.math == "tensor" and tile.row_stride not in (0, l.input_size))
    return "w_ih_rows" if padded else "w_ih"


def projection_arguments(l: LayerPlan, *, t0: int, rows: int, B: int,
                         sources: list[Sequence], xproj: int,
                         weights: dict[str, int]) -> dict[str, int]:
    return {"w_ih": weights[projection_weights(l)], "xproj": xproj, "rows": rows, "batch": B,
            "bias": weights.get("bias", 0)} | source_arguments(sources, t0)


def merge_grid(kernel: KernelSource, total: int, sm_count: int) -> tuple[int, int]:
    """A grid-stride loop: enough blocks to cover the output, at most 8 per SM."""
    return max(1, min(math.ceil(total / kernel.block[0]), sm_count * 8)), 1


def merge_arguments(out: Sequence, sources: list[Sequence], S: int, B: int,
                    t0: int = 0) -> dict[str, int]:
    """The merge of steps t0 .. t0+S-1 of the sources into out (its step 0 onward)."""
    return {"out": out.ptr, "out_stride_t": out.stride_t, "out_stride_b": out.stride_b,
            "seq_len": S, "batch": B} | source_arguments(sources, t0)


def mask_arguments(out: Sequence, S: int, B: int, features: int, lengths: int) -> dict[str, int]:
    """The mask of output ``out`` [S, B, features]: zero at the steps t ≥ lengths[b]."""
    return {"out": out.ptr, "out_stride_t": out.stride_t, "out_stride_b": out.stride_b,
            "seq_len": S, "batch": B, "features": features, "lengths": lengths}
