"""`ptxforge demo`: the main job on bundled nvcc output, on whatever this machine has."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from ptxforge.cli.common import check_output, input_files, load_module, read_text
from ptxforge.cli.demo_node import node_section
from ptxforge.dsl import ctaid, f32, guard, kernel, ld, mad, ntid, ptr, st, tid, u32
from ptxforge.emu.sanitizer import SanitizerError
from ptxforge.ptx import ir
from ptxforge.ptx.parser import parse
from ptxforge.ptx.printer import has_debug_info
from ptxforge.ptx.validator import validate
from ptxforge.runtime.cuda_device import cuda_device
from ptxforge.runtime.cuda_driver import unavailable_reason
from ptxforge.runtime.launch_config import EmulatorOptions
from ptxforge.runtime.result import LaunchResult
from ptxforge.toolchain import ToolNotFound, assemble, elf_sections, find_tool, ptxas_version


def bundled_ptx() -> tuple[str, str]:
    f = resources.files("ptxforge") / "data" / "demo.sm_90a.ptx"
    return f.read_text(), "demo.sm_90a.ptx"


def run(args: argparse.Namespace) -> int:
    if args.sm_map:
        check_output(args.sm_map, "--sm-map", input_files(args.file, role="--file"))
    if args.file:
        text, name = read_text(args.file), args.file
        if load_module(args.file) is None:
            return 1
    else:
        text, name = bundled_ptx()
    ok, m = _front_end(text, name)
    if not args.file:
        with_torch = _torch_sections()
        ok &= _emulate(m)
        ok &= _on_gpu(m)
        ok &= _sanitize(m)
        ok &= _dsl()
        if with_torch:
            ok &= with_torch.expert_parallel()
        else:
            _section("expert parallelism: skipped (torch is not installed; pip install 'ptxforge[torch]')")
        ok &= node_section(args.sm_map)
        if with_torch:
            ok &= with_torch.comm_section()
            ok &= with_torch.train_section()
        else:
            _section("communication kernels beside a GEMM: skipped (needs torch: pip install 'ptxforge[torch]')")
            _section("training with DualPipe x EP: skipped (needs torch: pip install 'ptxforge[torch]')")
    print("\ndemo: all checks passed" if ok else "\ndemo: some checks FAILED")
    return 0 if ok else 1


class _TorchSections(NamedTuple):
    expert_parallel: Callable[[], bool]
    comm_section: Callable[[], bool]
    train_section: Callable[[], bool]


def _torch_sections() -> _TorchSections | None:
    """The sections that need torch, or None when it is not installed."""
    try:
        # torch is optional (the `torch` extra) and a second to load: only these sections import it, when it is there
        from ptxforge.cli import demo_comm, demo_ep, demo_train
    except ImportError as e:
        if (e.name or "").partition(".")[0] != "torch":
            raise
        return None
    return _TorchSections(demo_ep.expert_parallel, demo_comm.comm_section, demo_train.train_section)


def _section(title: str) -> None:
    print(f"\n== {title}")


def _front_end(text: str, name: str) -> tuple[bool, ir.Module]:
    t0 = time.perf_counter()
    m = parse(text, filename=name)
    dt = time.perf_counter() - t0
    _section(f"front end: {name}, {len(text):,} bytes, .version {m.version[0]}.{m.version[1]}, .target "
             f"{', '.join(m.target.targets)} (parsed in {dt * 1e3:.1f} ms)")
    print(f"{'kernel':<18} {'params':>6} {'instrs':>6} {'regs':>5} {'smem B':>7}  most used")
    for k in m.kernels:
        ops = Counter(i.opcode for i in k.instructions())
        regs = sum(len(d.declared()) for d in _walk(k.body) if isinstance(d, ir.RegisterDecl))
        smem = sum(v.size for v in _walk(k.body) if isinstance(v, ir.Variable) and v.space == ".shared")
        top = ", ".join(f"{op} x{n}" for op, n in ops.most_common(4))
        print(f"{k.name:<18} {len(k.params):>6} {sum(ops.values()):>6} {regs:>5} {smem:>7}  {top}")
    problems = validate(m)
    print(f"validate: {'no problems' if not problems else f'{len(problems)} problems'}")
    for d in problems:
        print(d.format())
    same = m.to_ptx() == text
    canon = m.to_ptx(canonical=True)
    again = parse(canon) == m
    print(f"round trip: text {'byte-identical' if same else 'DIFFERS'}; canonical form re-parses "
          f"{'to the same IR' if again else 'DIFFERENTLY'}")
    ok = same and again and not problems
    return ok and _ptxas_check(m, text, canon), m


def _ptxas_check(m: ir.Module, text: str, canon: str) -> bool:
    try:
        tool = find_tool("ptxas")
    except ToolNotFound as e:
        print(f"ptxas: skipped ({e})")
        return True
    a = assemble(text, m.target.arch)
    b = assemble(canon, m.target.arch)
    if not (a.ok and b.ok):
        print(f"ptxas ({tool}): failed to assemble: {(a.stderr or b.stderr).strip()[:300]}")
        return False
    if a.cubin == b.cubin:
        verdict, same = "byte-identical", True
    else:
        # with debug info ptxas embeds a copy of the PTX text itself; everything else must match
        differ = {n for n, data in elf_sections(a.cubin).items() if elf_sections(b.cubin).get(n) != data}
        same = has_debug_info(m) and differ == {".nv_debug_ptx_txt"}
        verdict = "identical but for the embedded copy of the PTX text" if same else f"DIFFERS in {sorted(differ)}"
    print(f"ptxas {ptxas_version(tool)} ({tool}): cubin from the canonical text {verdict} ({len(a.cubin):,} bytes)")
    return same


def _emulate(m: ir.Module) -> bool:
    """Run the bundled kernels on the CPU emulator and compare with numpy."""
    _section("CPU emulator (bit-exact SIMT on numpy lanes)")
    rng = np.random.default_rng(0)
    ok = True

    n = 1 << 20
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    c = np.zeros(n, np.float32)
    res = m.kernel("vadd").launch(grid=(n // 256,), block=(256,), args=[a, b, c, np.int32(n)], device="emu")
    ok &= _report("vadd, 1M threads", np.array_equal(c, a + b), res)

    n = 1 << 16
    x = rng.random(n, np.float32)
    out = np.zeros(n // 256, np.float32)
    res = m.kernel("block_sum").launch(grid=(n // 256,), block=(256,), args=[x, out, np.int32(n)], device="emu")
    ok &= _report("block_sum, 64K threads", np.allclose(out, x.reshape(-1, 256).sum(1), rtol=1e-5), res)

    rows, cols = 64, 1024
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    q = np.zeros((rows, cols), np.uint8)
    scales = np.zeros((rows, cols // 128), np.float32)
    res = m.kernel("quant_fp8_1x128").launch(grid=(rows,), block=(32, cols // 128), args=[x, q, scales, np.int32(cols)],
                                             device="emu")
    groups = x.reshape(rows, cols // 128, 128)
    want_scales = np.abs(groups).max(-1) / np.float32(448)
    want_q = (groups / want_scales[..., None]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).reshape(rows, cols)
    match = np.array_equal(scales, want_scales) and np.array_equal(q, want_q)
    ok &= _report("quant_fp8_1x128 (E4M3, scale = amax/448)", match, res)
    return ok


def _on_gpu(m: ir.Module) -> bool:
    """The same kernels on the GPU, when this machine has one, bit for bit against the emulator."""
    why = unavailable_reason()
    if why is not None:
        _section("GPU: not used here")
        print(f"{why.split('; use')[0]}; everything above ran on the CPU emulator")
        return True
    dev = cuda_device()
    _section(f"GPU: {dev.name} ({dev.arch}, {dev.num_sms} SMs), the same PTX, bit for bit against the emulator")
    rng = np.random.default_rng(1)
    rows, cols, n = 64, 1024, 1 << 20
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    x = rng.random(1 << 16, np.float32)
    xq = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    cases: list[tuple[str, tuple[int, ...], tuple[int, ...], Callable[[], list[Any]], list[int]]] = [
        ("vadd", (n // 256,), (256,), lambda: [a, b, np.zeros(n, np.float32), np.int32(n)], [2]),
        ("block_sum", ((1 << 16) // 256,), (256,), lambda: [x, np.zeros(256, np.float32), np.int32(1 << 16)], [1]),
        ("quant_fp8_1x128", (rows,), (32, cols // 128),
         lambda: [xq, np.zeros((rows, cols), np.uint8), np.zeros((rows, cols // 128), np.float32), np.int32(cols)],
         [1, 2]),
    ]
    ok = True
    for name, grid, block, make, outs in cases:
        ea, ga = make(), make()
        m.kernel(name).launch(grid=grid, block=block, args=ea, device="emu")
        res = m.kernel(name).launch(grid=grid, block=block, args=ga, device="cuda")
        same = all(np.array_equal(ea[i], ga[i]) for i in outs)
        ok &= same
        print(f"{name:<42} {'identical to the emulator' if same else 'DIFFERS from the emulator'}  "
              f"{res.wall_s * 1e3:8.3f} ms on the GPU")
    return ok


def _report(what: str, match: bool, res: LaunchResult) -> bool:
    rate = res.thread_instructions / res.wall_s / 1e6 if res.wall_s else 0.0
    print(f"{what:<42} {'matches numpy' if match else 'MISMATCH'}  {res.thread_instructions:>12,} "
          f"thread-instructions, {res.wall_s * 1e3:7.1f} ms ({rate:,.0f} M/s)")
    return match


def _sanitize(m: ir.Module) -> bool:
    """The sanitizer on the racy reduction (and none on the correct one)."""
    _section("sanitizer: block_sum_racy forgets a __syncthreads()")
    x = np.arange(512, dtype=np.float32)
    out = np.zeros(2, np.float32)
    m.kernel("block_sum").launch(grid=(2,), block=(256,), args=[x, out, np.int32(512)], device="emu",
                                 options=EmulatorOptions(sanitize=True))
    print("block_sum (correct): no reports")
    try:
        m.kernel("block_sum_racy").launch(grid=(2,), block=(256,), args=[x, out, np.int32(512)], device="emu",
                                          options=EmulatorOptions(sanitize=True))
    except SanitizerError as e:
        print(str(e.reports[0]))
        print(f"({len(e.reports)} distinct report{'s' * (len(e.reports) != 1)}, kinds: "
              f"{', '.join(sorted({r.kind for r in e.reports}))})")
        return any(r.kind == "race" for r in e.reports)
    print("block_sum_racy: NO report (the sanitizer missed the race)")
    return False


def _dsl() -> bool:
    """A kernel written with the DSL: typed, validated, run on the emulator."""
    _section("DSL: one Python call per PTX instruction")

    @kernel(arch="sm_80")
    def saxpy(x: ptr(f32), y: ptr(f32), a: f32, n: u32):  # type: ignore[valid-type]  # DSL types, not Python's
        i = mad(ctaid.x, ntid.x, tid.x)
        with guard(i < n):
            st(y[i], a * ld(x[i]) + ld(y[i]))

    text = saxpy.ptx()
    count = sum(1 for _ in saxpy.module("sm_80").kernels[0].instructions())
    n = 1000
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    want = np.float32(2) * x + y
    res = saxpy.launch(grid=(4,), block=(256,), args=[x, y, np.float32(2), np.uint32(n)], device="emu")
    print(f"saxpy: {count} PTX instructions, {len(text.splitlines())} lines of validated PTX for sm_80")
    return _report("saxpy on the emulator", bool(np.array_equal(y, want)), res)


def _walk(body: Sequence[ir.Statement] | None) -> Iterator[ir.Statement]:
    for s in body or ():
        yield s
        if isinstance(s, ir.Block):
            yield from _walk(s.body)
