"""The lane arrays of a wave that depend only on the launch's shape (the static special registers: %tid,
%laneid, %smid, ...; which lanes are real threads; each lane's slot), cached per launch and with the kernel's
layout (`StaticLanes`, part of `Machine`); and the block's reserved shared memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.ptx import ir

STATIC_CACHE_BYTES = 64 << 20  # static lane arrays a kernel's layout keeps, oldest launch shape dropped first
RESERVED_SMEM = 1024  # the system-reserved shared memory of a block (cooperative groups use it)


def _uses_reserved_smem(layout) -> bool:
    hit = getattr(layout, "_uses_reserved_smem", None)
    if hit is None:
        hit = any(isinstance(o, ir.SpecialRegister) and o.name.startswith("%reserved_smem")
                  for p in layout.placed for o in p.ins.operands)
        layout._uses_reserved_smem = hit
    return hit


class StaticLanes:
    """The machine's static lane arrays (a part of `Machine`, kept apart for its size)."""

    if TYPE_CHECKING:  # the rest of `Machine`, for the type checker
        def __getattr__(self, name: str) -> Any: ...

    def _static(self, nslots: int) -> dict:
        """Lane arrays that depend only on the launch's shape and the number of slots: cached per launch, and
        with the kernel's layout (which lives with the module image) for the launches that share the shape.
        The cached arrays are read-only: ops read them, and register writes make new arrays."""
        hit = getattr(self, "_static_cache", None)
        if hit is not None and hit["nslots"] == nslots and hit["sms"] is self.wave_sms:
            return hit
        shared = self.wave_sms is None and not self.shuffled_warps
        key = (nslots, self.block, self.grid, self.num_sms, self.sm_ids.tobytes(), self.dynamic_shared,
               self.shared_size, self.reserved_smem, self.cluster, self.explicit_cluster,
               tuple(sorted(self.envregs.items()))) if shared else None
        cache = self.layout.__dict__.setdefault("_static_waves", {})
        hit = cache.get(key) if shared else None
        if hit is None:
            hit = self._make_static(nslots)
            arrays = [a for a in (*hit["sregs"].values(), hit["real_block"], hit["real"], hit["slot"],
                                  hit["warp_base"]) if isinstance(a, np.ndarray)]
            for a in arrays:
                a.flags.writeable = False
            hit["nbytes"] = sum(a.nbytes for a in arrays)
            if shared:
                while cache and sum(h["nbytes"] for h in cache.values()) + hit["nbytes"] > STATIC_CACHE_BYTES:
                    del cache[next(iter(cache))]  # the oldest shape first
                cache[key] = hit
        self._static_cache = hit
        return hit

    def _make_static(self, nslots: int) -> dict:
        lpb = self.lanes_per_block
        N = nslots * lpb
        t = self.lane_tid
        real = t < self.threads
        bx, by, bz = self.block
        gx, gy, gz = self.grid
        u = np.uint32

        def tile(a):
            return np.tile(np.where(real, a, 0).astype(u), nslots)
        lane = (np.arange(N, dtype=np.int64) & 31).astype(u)
        one = u(1) << lane
        lt = one - u(1)
        s = {
            "%tid.x": tile(t % bx), "%tid.y": tile((t // bx) % by), "%tid.z": tile(t // (bx * by)),
            "%ntid.x": u(bx), "%ntid.y": u(by), "%ntid.z": u(bz),
            "%nctaid.x": u(gx), "%nctaid.y": u(gy), "%nctaid.z": u(gz),
            "%laneid": lane, "%warpid": tile(t // 32), "%nwarpid": u(64),
            "%smid": np.repeat(self._slot_sms(nslots).astype(u), lpb), "%nsmid": u(self.num_sms),
            "%gridid": np.uint64(1),
            "%lanemask_eq": one, "%lanemask_lt": lt, "%lanemask_le": lt | one, "%lanemask_gt": ~(lt | one),
            "%lanemask_ge": ~lt,
            "%dynamic_smem_size": u(self.dynamic_shared), "%total_smem_size": u(self.shared_size),
            "%aggr_smem_size": u(self.shared_size),
            "%reserved_smem_offset_begin": u(self.shared_size - self.reserved_smem),
            "%reserved_smem_offset_end": u(self.shared_size), "%reserved_smem_offset_cap": u(self.reserved_smem),
            "%reserved_smem_offset_0": u(self.shared_size - self.reserved_smem),
            "%reserved_smem_offset_1": u(self.shared_size - self.reserved_smem + 16),
            "%cluster_ctarank": u(0), "%cluster_nctarank": u(self.csize),
            "%is_explicit_cluster": u(int(self.explicit_cluster)),
            "%nclusterid.x": u(gx // self.cluster[0]), "%nclusterid.y": u(gy // self.cluster[1]),
            "%nclusterid.z": u(gz // self.cluster[2]),
            "%current_graph_exec": np.uint64(0),
        }
        for i, d in enumerate("xyz"):
            s[f"%cluster_ctaid.{d}"] = u(0)
            s[f"%cluster_nctaid.{d}"] = u(self.cluster[i])
        for i in range(32):
            s[f"%envreg{i}"] = u(self.envregs.get(i, 0))
        for i in range(8):  # performance monitoring counters: not modelled, they read 0
            s[f"%pm{i}"] = u(0)
            s[f"%pm{i}_64"] = np.uint64(0)
        return {"nslots": nslots, "sms": self.wave_sms, "sregs": s, "real_block": real,
                "real": np.tile(real, nslots), "slot": np.repeat(np.arange(nslots, dtype=np.int64), lpb),
                "warp_base": np.arange(N, dtype=np.int64) & ~np.int64(31)}
