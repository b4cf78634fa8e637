"""LLVM IR to machine code (llvmlite's MCJIT) at one of two levels, the object code cached on disk by content.

Levels: "quick" (codegen at -O0, no IR passes: about 3x cheaper to compile, the code larger and slower) for
launches too small or too rare to repay more, and "opt" (codegen at -O3 after the speed-3 pass pipeline) for
big or hot ones (select.py decides). Both run the same IR, so they give the same bits.

The cache key is a hash of the level, the IR text, the llvmlite version and the host CPU (name and features),
so a cached object is only ever loaded by the machine kind that made it. Objects are entries of kind "native"
in ptxforge's cache (`ptxforge.cache`: PTXFORGE_CACHE_DIR, off to compile every time), read only when the
cache trusts them (owned by this user, writable by nobody else, the digest matching): loading one runs its
code. Asked for the quick level (not exactly), `load` takes the optimized object where one is already in
memory or on disk.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from ptxforge import cache

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
_LOADED: dict[str, tuple[Any, int]] = {}  # key -> (engine, address of run_blocks): kept alive while loaded
KIND = "native"  # its entries in ptxforge.cache (`ptxforge cache info|clear` count and clear them)
LEVELS = ("quick", "opt")
CODEGEN_OPT = {"quick": 0, "opt": 3}  # the target machine's optimization level per level
PASS_SPEED = {"quick": 0, "opt": 3}  # the IR pass pipeline's speed level (0: no passes)
# compiles and loads so far; compile_s: CPU seconds in LLVM (parse, passes, code generation) per level
STATS: dict[str, Any] = {"compiled": 0, "disk_hits": 0, "memory_hits": 0,
                         "compiled_quick": 0, "compiled_opt": 0, "compile_s_quick": 0.0, "compile_s_opt": 0.0}


def _host() -> str:
    if "host" not in _STATE:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        _STATE["host"] = f"{llvm.get_process_triple()} {cpu} {features}"
    return _STATE["host"]


def host_feature(name: str) -> bool:
    """Whether this host's CPU has the LLVM target feature `name` (e.g. "avx512f"), which the code it compiles
    may then use."""
    if "features" not in _STATE:
        _host()
        _STATE["features"] = {k for k, on in llvm.get_host_cpu_features().items() if on}
    return name in _STATE["features"]


def _target(level: str) -> Any:
    """The target machine that compiles at `level` (made once)."""
    _host()
    tm = _STATE.get(level)
    if tm is None:
        tm = _STATE[level] = _new_target_machine(CODEGEN_OPT[level])
    return tm


def _new_target_machine(opt: int = 3) -> Any:
    target = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="default",
                                        codemodel="jitdefault")


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"native compile level must be one of {', '.join(map(repr, LEVELS))}, not {level!r}")
    return level


def cache_key(ir_text: str, level: str = "opt") -> str:
    h = hashlib.sha256()
    for part in (llvmlite.__version__, _host(), check_level(level), ir_text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _compile(ir_text: str, level: str) -> bytes:
    t0 = time.process_time()
    tm = _target(level)
    mod = llvm.parse_assembly(ir_text)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    if PASS_SPEED[level]:
        pto = llvm.create_pipeline_tuning_options(speed_level=PASS_SPEED[level])
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    obj = tm.emit_object(mod)
    STATS["compiled"] += 1
    STATS[f"compiled_{level}"] += 1
    STATS[f"compile_s_{level}"] += time.process_time() - t0
    return obj


def loaded(ir_text: str, level: str) -> bool:
    """Whether machine code for `ir_text` at `level` is loaded in this process."""
    return cache_key(ir_text, level) in _LOADED


def load(ir_text: str, level: str = "opt", exact: bool = False) -> tuple[int, str]:
    """(the address of `run_blocks` in machine code for `ir_text`, the level it was compiled at): from memory,
    from disk, or compiled now at `level` (for "quick", unless `exact`: the optimized code where that is at
    hand already)."""
    check_level(level)
    with _LOCK:
        tries = ["opt", "quick"] if level == "quick" and not exact else [level]
        keys = {lv: cache_key(ir_text, lv) for lv in tries}
        for lv in tries:
            hit = _LOADED.get(keys[lv])
            if hit is not None:
                STATS["memory_hits"] += 1
                return hit[1], lv
        # machine code runs as it is: only an entry ptxforge.cache trusts (owner, mode, digest) is loaded
        for lv in tries:
            obj = cache.get(KIND, keys[lv])
            if obj is not None:
                STATS["disk_hits"] += 1
                return _engine(keys[lv], obj), lv
        obj = _compile(ir_text, level)
        cache.put(KIND, keys[level], obj)
        return _engine(keys[level], obj), level


def _engine(key: str, obj: bytes) -> int:
    # an engine owns its target machine (freed with it): each gets its own
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addr = engine.get_function_address("run_blocks")
    if not addr:
        raise RuntimeError(f"the native object {key} has no run_blocks")
    _LOADED[key] = (engine, addr)
    return addr
