"""Fused activations: SiLU-and-mul over [tokens, 2d] (gate | up) and a tanh-approximate GELU with bias."""

import triton
import triton.language as tl


@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_bias_kernel(x_ptr, bias_ptr, out_ptr, n, d, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0) + tl.load(bias_ptr + offs % d, mask=mask, other=0.0)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 2 * tl.sigmoid(2 * inner) - 1   # tanh(inner)
    tl.store(out_ptr + offs, 0.5 * x * (1 + t), mask=mask)


CORPUS = [
    dict(name="silu_and_mul_bf16", fn=silu_and_mul_kernel,
         signature={"x_ptr": "*bf16", "out_ptr": "*bf16", "d": "i32", "BLOCK": "constexpr"},
         constexprs={"BLOCK": 1024}, divisible=["x_ptr", "out_ptr", "d"], num_warps=4),
    dict(name="gelu_bias_f32", fn=gelu_bias_kernel,
         signature={"x_ptr": "*fp32", "bias_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "d": "i32",
                    "BLOCK": "constexpr"},
         constexprs={"BLOCK": 1024}, divisible=["x_ptr", "out_ptr"], num_warps=4),
]
