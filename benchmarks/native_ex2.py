"""ex2.approx.f32 and lg2.approx.f32 on the native tier (issue 29: lower_libm.py), at one thread, CPU time of
this process per launch (best of N): the corpus' row softmax (softmax_layernorm.cu `softmax_rows`, expf ->
ex2.approx.ftz.f32, and `softmax_rows_online`, __expf) on 4096 x 256 floats, the first with ex2 replaced by
mov (what the rest of the kernel costs), and a kernel of 8 ex2 or lg2 per thread over 1M threads (|x| + 1/1000
for lg2; mov in their place: the loads and stores); then the softmax kernels' compile cost
(benchmarks/native_compile_cost.py's figures).

    python benchmarks/native_ex2.py [--repeat N]
"""

from __future__ import annotations

import argparse
import resource
from pathlib import Path

import numpy as np
from native_compile_cost import measure

import ptxforge as pf
from ptxforge.runtime.buffers import to_device

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "ptx" / "cuda"
ONE_THREAD = {"tier": "native", "level": "opt", "threads": 1}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def best_ms(kernel, grid: int, args: list, repeat: int) -> float:
    r = kernel.launch(grid=(grid,), block=(256,), args=args, options=ONE_THREAD)  # (compiles)
    assert r.tier == "native", r.tier_note
    best = float("inf")
    for _ in range(repeat):
        t = _cpu()
        kernel.launch(grid=(grid,), block=(256,), args=args, options=ONE_THREAD)
        best = min(best, _cpu() - t)
    return best * 1e3


def eight_ex2(op: str) -> str:
    body = []
    for i in range(8):
        body += [f"mul.f32 %f{10 + i}, %f1, 0f{np.float32(1 + i / 8).view(np.uint32):08X};",
                 f"{op} %f{20 + i}, %f{10 + i};", f"add.f32 %f2, %f2, %f{20 + i};"]
    return "\n".join([
        ".version 7.0", ".target sm_80", ".address_size 64", ".visible .entry k(.param .u64 px, .param .u64 py)",
        "{", ".reg .f32 %f<40>;", ".reg .b32 %r<8>;", ".reg .b64 %rd<8>;",
        "mov.u32 %r1, %ctaid.x;", "mov.u32 %r2, %ntid.x;", "mov.u32 %r3, %tid.x;", "mad.lo.s32 %r4, %r1, %r2, %r3;",
        "ld.param.u64 %rd1, [px];", "ld.param.u64 %rd2, [py];", "mul.wide.u32 %rd3, %r4, 4;",
        "add.s64 %rd4, %rd1, %rd3;", "add.s64 %rd5, %rd2, %rd3;", "ld.global.f32 %f1, [%rd4];",
        "mov.f32 %f2, 0f00000000;", *body, "st.global.f32 [%rd5], %f2;", "ret;", "}"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    n = ap.parse_args().repeat
    text = (CORPUS / "softmax_layernorm.sm_80.O3.ptx").read_text()
    x = np.random.default_rng(0).standard_normal((4096, 256), np.float32)
    args = [to_device(x), to_device(np.zeros_like(x)), np.int32(256)]
    print("| kernel, one thread | CPU ms |\n|---|---|")
    for name, src in (("softmax_rows", text), ("softmax_rows_online", text),
                      ("softmax_rows, ex2 -> mov", text.replace("ex2.approx.ftz.f32", "mov.f32"))):
        k = pf.parse(src, filename="softmax_layernorm.ptx").kernel(name.split(",")[0])
        print(f"| {name} 4096 x 256 | {best_ms(k, 4096, args, n):.2f} |", flush=True)
    m = 1 << 20
    xs = np.random.default_rng(1).standard_normal(m).astype(np.float32) * 8
    margs = [to_device(xs), to_device(np.zeros_like(xs))]
    lg2_args = [to_device(np.abs(xs) + np.float32(1e-3)), margs[1]]
    for op in ("ex2.approx.ftz.f32", "ex2.approx.f32", "lg2.approx.ftz.f32", "lg2.approx.f32", "mov.f32"):
        k = pf.parse(eight_ex2(op), filename="x8.ptx").kernel("k")
        a = lg2_args if op.startswith("lg2") else margs
        print(f"| 8 x {op} per thread, 1M threads | {best_ms(k, m // 256, a, n):.2f} |", flush=True)
    print("\n| kernel | IR lines | LLVM quick s | LLVM opt s |\n|---|---|---|---|")
    for name in ("softmax_rows", "softmax_rows_online"):
        r = measure("softmax_layernorm", name, (256, 1, 1), 3)
        print(f"| {name} | {r['ir_lines']:.0f} | {r['quick']:.3f} | {r['opt']:.3f} |")


if __name__ == "__main__":
    main()
