"""Elementwise Triton kernels: out = x + y (fp32 and fp16), and out = a * x + y with a scalar."""

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def axpy_kernel(a, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (a * x + y).to(out_ptr.dtype.element_ty), mask=mask)


CORPUS = [
    dict(name="vector_add_f32", fn=add_kernel,
         signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
         constexprs={"BLOCK": 1024}, divisible=["x_ptr", "y_ptr", "out_ptr", "n"], num_warps=4),
    dict(name="axpy_f16", fn=axpy_kernel,
         signature={"a": "fp32", "x_ptr": "*fp16", "y_ptr": "*fp16", "out_ptr": "*fp16", "n": "i32",
                    "BLOCK": "constexpr"},
         constexprs={"BLOCK": 512}, divisible=["x_ptr", "y_ptr", "out_ptr"], num_warps=4),
]
