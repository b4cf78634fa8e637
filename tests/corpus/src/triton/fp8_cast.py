"""FP8 per-token-group quantization in Triton: groups of GROUP columns, scale = amax / 448 (e4m3) or
amax / 57344 (e5m2). x is [tokens, hidden]; q [tokens, hidden] fp8; scales [tokens, hidden / GROUP]."""

import triton
import triton.language as tl


@triton.jit
def group_quant_fp8(x_ptr, q_ptr, s_ptr, hidden, eps, FP8_MAX: tl.constexpr, GROUP: tl.constexpr):
    row = tl.program_id(0)
    g = tl.program_id(1)
    cols = g * GROUP + tl.arange(0, GROUP)
    x = tl.load(x_ptr + row * hidden + cols).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=0), eps)
    scale = amax / FP8_MAX
    q = tl.clamp(x / scale, -FP8_MAX, FP8_MAX).to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + row * hidden + cols, q)
    tl.store(s_ptr + row * (hidden // GROUP) + g, scale)


CORPUS = [
    # float8e4nv (OCP e4m3fn) needs sm_89+ in Triton, so this one is compiled for sm_90 only
    dict(name="group_quant_fp8_e4m3", fn=group_quant_fp8,
         signature={"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "hidden": "i32", "eps": "fp32",
                    "FP8_MAX": "constexpr", "GROUP": "constexpr"},
         constexprs={"FP8_MAX": 448.0, "GROUP": 128}, divisible=["x_ptr", "q_ptr", "hidden"], num_warps=4,
         archs=(90,)),
    dict(name="group_quant_fp8_e5m2", fn=group_quant_fp8,
         signature={"x_ptr": "*fp32", "q_ptr": "*fp8e5", "s_ptr": "*fp32", "hidden": "i32", "eps": "fp32",
                    "FP8_MAX": "constexpr", "GROUP": "constexpr"},
         constexprs={"FP8_MAX": 57344.0, "GROUP": 128}, divisible=["x_ptr", "q_ptr", "hidden"], num_warps=4),
]
