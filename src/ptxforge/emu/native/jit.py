"""LLVM IR to machine code (llvmlite's MCJIT), with the object code cached on disk by content.

The cache key is a hash of the IR text, the llvmlite version and the host CPU (name and features), so a
cached object is only ever loaded by the machine kind that made it. Objects are entries of kind "native" in
ptxforge's cache (`ptxforge.cache`: PTXFORGE_CACHE_DIR, off to compile every time), read only when the cache
trusts them (owned by this user, writable by nobody else, the digest matching): loading one runs its code.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from ptxforge import cache

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
_LOADED: dict[str, tuple[Any, int]] = {}  # key -> (engine, address of run_blocks): kept alive while loaded
KIND = "native"  # its entries in ptxforge.cache (`ptxforge cache info|clear` count and clear them)
STATS = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}


def _target() -> tuple[Any, Any]:
    if "tm" not in _STATE:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        _STATE["tm"] = _new_target_machine()
        _STATE["host"] = f"{llvm.get_process_triple()} {cpu} {features}"
        _STATE["engine_module"] = None
    return _STATE["tm"], _STATE["host"]


def _new_target_machine() -> Any:
    target = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="default", codemodel="jitdefault")


def cache_key(ir_text: str) -> str:
    _, host = _target()
    h = hashlib.sha256()
    for part in (llvmlite.__version__, host, ir_text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _compile(ir_text: str) -> bytes:
    tm, _ = _target()
    mod = llvm.parse_assembly(ir_text)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    STATS["compiled"] += 1
    return tm.emit_object(mod)


def load(ir_text: str) -> int:
    """The address of `run_blocks` in machine code for `ir_text` (compiled now, or from the caches)."""
    key = cache_key(ir_text)
    with _LOCK:
        hit = _LOADED.get(key)
        if hit is not None:
            STATS["memory_hits"] += 1
            return hit[1]
        # machine code runs as it is: only an entry ptxforge.cache trusts (owner, mode, digest) is loaded
        obj = cache.get(KIND, key)
        if obj is not None:
            STATS["disk_hits"] += 1
        else:
            obj = _compile(ir_text)
            cache.put(KIND, key, obj)
        _target()
        # an engine owns its target machine (freed with it): each gets its own
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addr = engine.get_function_address("run_blocks")
        if not addr:
            raise RuntimeError(f"the native object {key} has no run_blocks")
        _LOADED[key] = (engine, addr)
        return addr
