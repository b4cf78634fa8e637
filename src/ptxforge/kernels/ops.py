"""torch-tensor wrappers around the kernels: tensors in, tensors out, on the tensor's device.

Each wrapper copies its inputs to numpy, launches the DSL kernel (`device=None`: "cuda" for CUDA tensors,
else $PTXFORGE_DEVICE, else the emulator) and returns torch tensors on the input's device. Shapes are checked
here, with messages that name the argument; hidden sizes that are not a multiple of 128 are zero-padded as
DeepGEMM does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import torch

from ptxforge import environment
from ptxforge.kernels import fp8, layout, routing

if TYPE_CHECKING:
    from ptxforge.runtime.device import Device

WARPS_PER_BLOCK = 4
_specialized: dict = {}


def _special(k, **consts):
    """k.specialize(**consts), built once per process."""
    key = (k.name, tuple(sorted(consts.items())))
    if key not in _specialized:
        _specialized[key] = k.specialize(**consts)
    return _specialized[key]


def _device(t: torch.Tensor, device):
    """The device named, else the GPU for a CUDA tensor, else $PTXFORGE_DEVICE, else the emulator."""
    return device or ("cuda" if t.is_cuda else environment.device() or "emu")


def _np(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    return t.numpy()


def _torch(a: np.ndarray, like: torch.Tensor, dtype=None) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        out = torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    elif a.dtype == ml_dtypes.float8_e4m3fn:
        out = torch.from_numpy(np.ascontiguousarray(a).view(np.uint8)).view(torch.float8_e4m3fn)
    else:
        out = torch.from_numpy(np.ascontiguousarray(a))
    if dtype is not None:
        out = out.view(dtype) if out.element_size() == torch.empty(0, dtype=dtype).element_size() else out.to(dtype)
    return out.to(like.device)


def _check_2d(name: str, t: torch.Tensor, dtype) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor, got {getattr(t, 'shape', type(t).__name__)}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {t.dtype}")


def _pad_cols(a: np.ndarray, multiple: int) -> np.ndarray:
    pad = -a.shape[1] % multiple
    return np.pad(a, ((0, 0), (0, pad))) if pad else a


def per_token_cast_to_fp8(x: torch.Tensor, round_scale: bool = False, packed_ue8m0: bool = False, *,
                          device: str | Device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 [T, H], scales): f32 [T, ceil(H/128)], or with `packed_ue8m0` (implies round_scale) int32
    [T, ceil(H/512)] holding 4 UE8M0 bytes each (missing groups padded with 127, i.e. 1.0)."""
    _check_2d("x", x, torch.bfloat16)
    round_scale = round_scale or packed_ue8m0
    t_, h = x.shape
    xa = _pad_cols(_np(x), fp8.GROUP)
    g = xa.shape[1] // fp8.GROUP
    q = np.zeros(xa.shape, ml_dtypes.float8_e4m3fn)
    sf = np.zeros((t_, g), np.float32)
    e = np.zeros((t_, g), np.uint8)
    groups = t_ * g
    if groups:
        k = fp8.per_token_quant_pow2 if round_scale else fp8.per_token_quant
        k.launch(grid=(-(-groups // WARPS_PER_BLOCK),), block=(32 * WARPS_PER_BLOCK,),
                 args=[xa, q, sf, e, np.uint32(groups)], device=_device(x, device))
    q_t = _torch(q[:, :h], x, torch.float8_e4m3fn)
    if packed_ue8m0:
        e = np.pad(e, ((0, 0), (0, -g % 4)), constant_values=127)
        return q_t, _torch(fp8.pack_ue8m0(e), x)
    return q_t, _torch(sf, x)


def per_token_cast_back(q: torch.Tensor, scales: torch.Tensor, *, device: str | Device | None = None) -> torch.Tensor:
    """bf16 [T, H] from E4M3 [T, H] and f32 scales [T, H/128] or packed UE8M0 int32 [T, H/512]."""
    _check_2d("q", q, torch.float8_e4m3fn)
    t_, h = q.shape
    qa = _pad_cols(_np(q), fp8.GROUP)
    g = qa.shape[1] // fp8.GROUP
    packed = scales.dtype == torch.int32
    want = (t_, -(-g // 4)) if packed else (t_, g)
    if tuple(scales.shape) != want:
        raise ValueError(f"scales must have shape {list(want)} for q of shape {list(q.shape)}, "
                         f"got {list(scales.shape)}")
    if not packed and scales.dtype != torch.float32:
        raise TypeError(f"scales must be torch.float32 or packed UE8M0 torch.int32, got {scales.dtype}")
    sf = np.zeros((t_, g), np.float32) if packed else np.ascontiguousarray(_np(scales))
    e = np.ascontiguousarray(fp8.unpack_ue8m0(_np(scales))[:, :g]) if packed else np.zeros((t_, g), np.uint8)
    out = np.zeros(qa.shape, ml_dtypes.bfloat16)
    groups = t_ * g
    if groups:
        k = fp8.dequant_ue8m0 if packed else fp8.dequant
        k.launch(grid=(-(-groups // WARPS_PER_BLOCK),), block=(32 * WARPS_PER_BLOCK,),
                 args=[qa, sf, e, out, np.uint32(groups)], device=_device(q, device))
    return _torch(out[:, :h], q)


def per_block_cast_to_fp8(w: torch.Tensor, round_scale: bool = False, *,
                          device: str | Device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 [M, N], f32 scales [ceil(M/128), ceil(N/128)]): one scale per 128x128 block (zero-padded)."""
    _check_2d("w", w, torch.bfloat16)
    m, n = w.shape
    wa = _pad_cols(_pad_cols(_np(w), fp8.GROUP).T, fp8.GROUP).T.copy()
    mp, np_ = wa.shape
    q = np.zeros(wa.shape, ml_dtypes.float8_e4m3fn)
    sf = np.zeros((mp // fp8.GROUP, np_ // fp8.GROUP), np.float32)
    if q.size:
        k = fp8.block_quant_pow2 if round_scale else fp8.block_quant
        k.launch(grid=(np_ // fp8.GROUP, mp // fp8.GROUP), block=(fp8.GROUP,), args=[wa, q, sf, np.uint32(np_)],
                 device=_device(w, device))
    return _torch(q[:m, :n], w, torch.float8_e4m3fn), _torch(sf, w)


def route(logits: torch.Tensor, bias: torch.Tensor, n_group: int = 8, topk_group: int = 4, topk: int = 8,
          routed_scaling_factor: float = 2.5, *,
          device: str | Device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 routing: (topk_idx int64 [T, topk], topk_weights f32 [T, topk])."""
    _check_2d("logits", logits, torch.float32)
    t_, e_ = logits.shape
    if e_ % n_group or topk > (e_ // n_group) * topk_group or topk_group > n_group or n_group > 32:
        raise ValueError(f"route: {e_} experts in {n_group} groups (at most 32) cannot give top-{topk} from "
                         f"{topk_group} groups")
    if tuple(bias.shape) != (e_,):
        raise ValueError(f"bias must have shape [{e_}], got {list(bias.shape)}")
    la, ba = _np(logits), _np(bias.float())
    idx = np.zeros((t_, topk), np.int32)
    w = np.zeros((t_, topk), np.float32)
    if t_:
        k = _special(routing.route, E=e_, N_GROUP=n_group, TOPK_GROUP=topk_group, TOPK=topk,
                                     SCALE=float(routed_scaling_factor))
        k.launch(grid=(-(-t_ // 32),), block=(32,), args=[la, ba, np.zeros_like(la), np.zeros_like(la), idx, w,
                                                          np.uint32(t_)], device=_device(logits, device))
    return _torch(idx.astype(np.int64), logits), _torch(w, logits)


def get_dispatch_layout(topk_idx: torch.Tensor, num_experts: int, num_ranks: int, ranks_per_node: int | None = None,
                        *, device: str | Device | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(tokens per rank int32 [R], per node int32 [N] or None, per expert int32 [E], is_token_in_rank bool [T, R])."""
    t_, k_ = topk_idx.shape
    rpn = ranks_per_node or num_ranks
    idx = _np(topk_idx).astype(np.int32)
    pr, pe = np.zeros(num_ranks, np.uint32), np.zeros(num_experts, np.uint32)
    pn, ir = np.zeros(num_ranks // rpn, np.uint32), np.zeros((t_, num_ranks), np.uint8)
    if t_:
        k = _special(layout.dispatch_layout, TOPK=k_, RANKS=num_ranks, EXPERTS_PER_RANK=num_experts // num_ranks,
                                              RANKS_PER_NODE=rpn)
        k.launch(grid=(-(-t_ // 128),), block=(128,), args=[idx, pr, pe, pn, ir, np.uint32(t_)],
                 device=_device(topk_idx, device))
    as_t = lambda a: _torch(a.astype(np.int32), topk_idx)  # noqa: E731
    return as_t(pr), (as_t(pn) if rpn < num_ranks else None), as_t(pe), _torch(ir.astype(bool), topk_idx)


def expert_positions(topk_idx: torch.Tensor, num_experts: int, *,
                     device: str | Device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(pos int64 [T, K]: the row of each copy grouped by expert, -1 for none; first_row int64 [E + 1])."""
    idx = _np(topk_idx).astype(np.int32)
    pos = np.full(idx.shape, -1, np.int32)
    first = np.zeros(num_experts + 1, np.uint32)
    if num_experts:
        layout.expert_positions.launch(grid=(-(-num_experts // 128),), block=(128,),
                                       args=[idx, pos, first, np.uint32(idx.size), np.uint32(num_experts)],
                                       device=_device(topk_idx, device))
    return _torch(pos.astype(np.int64), topk_idx), _torch(first.astype(np.int64), topk_idx)


def permute(x: torch.Tensor, pos: torch.Tensor, *, device: str | Device | None = None) -> torch.Tensor:
    """Rows of x copied to their expert-grouped rows: out[pos[t, k]] = x[t] (any dtype, rows of 4n bytes)."""
    xa = _np(x)
    raw = np.ascontiguousarray(xa).view(np.uint8).reshape(xa.shape[0], -1)
    if raw.shape[1] % 4:
        raise ValueError(f"permute: a row of x is {raw.shape[1]} bytes; the kernel moves 32-bit words")
    p = _np(pos).astype(np.int32)
    n = int((p >= 0).sum())
    out = np.zeros((n, raw.shape[1]), np.uint8)
    if n:
        k = _special(layout.gather_rows, TOPK=p.shape[1])
        k.launch(grid=(p.size,), block=(layout.BLOCK,), args=[raw.view(np.uint32), p, out.view(np.uint32),
                                                             np.uint32(raw.shape[1] // 4)], device=_device(x, device))
    return _torch(out, x).view(x.dtype).reshape((n,) + tuple(x.shape[1:]))


def unpermute(y: torch.Tensor, pos: torch.Tensor, weights: torch.Tensor | None = None, *,
              device: str | Device | None = None) -> torch.Tensor:
    """bf16 [T, H]: each token's rows summed in f32 in k order, times its weights when given."""
    _check_2d("y", y, torch.bfloat16)
    p = _np(pos).astype(np.int32)
    t_, k_ = p.shape
    h = y.shape[1]
    out = np.zeros((t_, h), ml_dtypes.bfloat16)
    w = np.ascontiguousarray(_np(weights.float())) if weights is not None else np.zeros((t_, k_), np.float32)
    if t_ and h:
        k = _special(layout.unpermute, TOPK=k_, weighted=weights is not None)
        k.launch(grid=(t_,), block=(layout.BLOCK,), args=[np.ascontiguousarray(_np(y)), p, w, out, np.uint32(h)],
                 device=_device(y, device))
    return _torch(out, y)
