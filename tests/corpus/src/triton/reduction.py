"""Reductions: per-row sum and max (one program per row), and a grid-wide sum with tl.atomic_add."""

import triton
import triton.language as tl


@triton.jit
def row_sum_max(x_ptr, sum_ptr, max_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    mx = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        acc += x
        mx = tl.maximum(mx, tl.where(cols < n_cols, x, -float("inf")))
    tl.store(sum_ptr + row, tl.sum(acc, axis=0))
    tl.store(max_ptr + row, tl.max(mx, axis=0))


@triton.jit
def atomic_total(x_ptr, total_ptr, count_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))
    tl.atomic_max(count_ptr, tl.max(x, axis=0))


CORPUS = [
    dict(name="row_sum_max", fn=row_sum_max,
         signature={"x_ptr": "*fp32", "sum_ptr": "*fp32", "max_ptr": "*fp32", "n_cols": "i32", "stride": "i32",
                    "BLOCK": "constexpr"},
         constexprs={"BLOCK": 512}, divisible=["x_ptr", "stride"], num_warps=4),
    dict(name="atomic_total_i32", fn=atomic_total,
         signature={"x_ptr": "*i32", "total_ptr": "*i32", "count_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"},
         constexprs={"BLOCK": 1024}, divisible=["x_ptr"], num_warps=4),
]
