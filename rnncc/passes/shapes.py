"""Shapes: which calls a plan serves, and which plan a call of another shape gets.

Every kernel takes S and B as run-time arguments, so any shape runs on any plan. But the
decisions depend on the shape: B sets the batch tiles and whether a persistent kernel or
a cuBLASLt step wins (the cost model's times move by up to 2× between B=8 and B=64), and
S·B the rows of the hoisted projection GEMM and so its tiles and the unroll. A compiled
model therefore keeps one plan per *shape class*: S and B each rounded up to a power of
two. Within a class the modelled times change little (tiles are multiples of 8 rows, and
the GEMM rows at most double); across classes they can change the mode. The plan of the
hints (``compile(seq_len=, batch=)``) serves its own class exactly as hinted; a call in
another class is planned for that class's upper bounds on its first call. Kernels are
named by their code, so a class whose kernels equal an earlier class's compiles nothing.
"""

from dataclasses import replace

from ..plan import Decision


def shape_class(seq_len: int, batch: int) -> tuple[int, int]:
    """(S, B) rounded up to powers of two: the shape a call of (seq_len, batch) is planned
    for, unless it falls in the class of the compile hints."""
    return 1 << (seq_len - 1).bit_length(), 1 << (batch - 1).bit_length()


def describe_class(seq_len: int, batch: int) -> str:
    s, b = shape_class(seq_len, batch)
    return f"S in ({s // 2}, {s}], B in ({b // 2}, {b}]"


def plan_shapes(model, plan, target):
    o = plan.options
    s, b = shape_class(o.seq_len, o.batch)
    return replace(plan, shapes=Decision(
        {"seq_len": "run-time", "batch": "run-time", "class": f"S≤{s}, B≤{b}"},
        f"every kernel takes S and B as arguments. This plan (for S={o.seq_len}, B={o.batch}) "
        f"serves calls with {describe_class(o.seq_len, o.batch)}; a call in another class "
        "(S and B each rounded up to a power of two) gets a plan of its own on its first call, "
        "since B moves tiles and modes and S·B the projection; kernels equal to ones already "
        "built compile nothing"))
