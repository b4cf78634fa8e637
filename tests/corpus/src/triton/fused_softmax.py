"""Row softmax: one program per row, the whole row in one block (n_cols <= BLOCK)."""

import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


CORPUS = [
    dict(name="fused_softmax", fn=softmax_kernel,
         signature={"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32", "out_stride": "i32",
                    "n_cols": "i32", "BLOCK": "constexpr"},
         constexprs={"BLOCK": 1024}, divisible=["out_ptr", "in_ptr", "in_stride", "out_stride"], num_warps=8),
]
