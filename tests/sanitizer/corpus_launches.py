"""Launches of correct corpus kernels (tests/corpus/ptx/cuda/*.sm_80.O3.ptx) for the no-false-positive check.

Each entry: (corpus file, kernel, grid, block, args factory, dynamic shared bytes). Sizes are small so
the whole table runs in seconds; the shapes follow the launch notes in each .cu source.
"""

from __future__ import annotations

import numpy as np


def _f32(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def _i32(n, lo=-100, hi=100, seed=1):
    return np.random.default_rng(seed).integers(lo, hi, n).astype(np.int32)


def _u32(n, hi=1000, seed=2):
    return np.random.default_rng(seed).integers(0, hi, n).astype(np.uint32)


def _z(n, dt=np.float32):
    return np.zeros(n, dt)


N = 1000  # not a multiple of the block size: tail threads take the bounds checks

LAUNCHES = [
    ("vector_ops", "vadd_f32", (4,), (256,), lambda: [_f32(N), _f32(N, 3), _z(N), np.int32(N)], 0),
    (
        "vector_ops",
        "scale_f32x4",
        (1,),
        (128,),
        lambda: [_f32(400), _z(400), np.float32(3.0), np.int32(100)],
        0,
    ),
    ("reductions", "reduce_sum_shared", (4,), (256,), lambda: [_f32(N), _z(4), np.int32(N)], 0),
    ("reductions", "reduce_sum_warp", (2,), (256,), lambda: [_f32(N), _z(2), np.int32(N)], 0),
    ("reductions", "reduce_max_i32", (4,), (256,), lambda: [_i32(N), _z(4, np.int32), np.int32(N)], 0),
    (
        "reductions",
        "reduce_sum_f64_atomic",
        (4,),
        (256,),
        lambda: [np.arange(N, dtype=np.float64), _z(1, np.float64), np.int32(N)],
        0,
    ),
    (
        "scans",
        "scan_inclusive_hillis_steele",
        (4,),
        (256,),
        lambda: [_i32(N), _z(N, np.int32), np.int32(N)],
        0,
    ),
    ("scans", "scan_exclusive_blelloch", (4,), (256,), lambda: [_f32(N), _z(N), np.int32(N)], 0),
    (
        "scans",
        "scan_inclusive_warp_shuffle",
        (4,),
        (256,),
        lambda: [_u32(N), _z(N, np.uint32), np.int32(N)],
        0,
    ),
    (
        "scans",
        "compact_positive",
        (4,),
        (256,),
        lambda: [_i32(N), _z(1024, np.int32), _z(4, np.int32), np.int32(N)],
        0,
    ),
    (
        "histogram",
        "histogram_global",
        (2,),
        (128,),
        lambda: [_u32(N), _z(64, np.uint32), np.int32(N), np.uint32(64)],
        0,
    ),
    (
        "histogram",
        "histogram_shared",
        (2,),
        (128,),
        lambda: [_u32(N), _z(200, np.uint32), np.int32(N), np.uint32(200)],
        0,
    ),
    (
        "matmul_tiled",
        "matmul_tiled_f32",
        (2, 2),
        (16, 16),
        lambda: [_f32(32 * 24), _f32(24 * 32, 5), _z(32 * 32), np.int32(32), np.int32(32), np.int32(24)],
        0,
    ),
    (
        "transpose",
        "transpose_padded",
        (2, 2),
        (32, 8),
        lambda: [_f32(64 * 64), _z(64 * 64), np.int32(64), np.int32(64)],
        0,
    ),
    (
        "transpose",
        "transpose_naive",
        (2, 2),
        (32, 8),
        lambda: [_f32(64 * 64), _z(64 * 64), np.int32(64), np.int32(64)],
        0,
    ),
    (
        "softmax_layernorm",
        "softmax_rows",
        (3,),
        (256,),
        lambda: [_f32(3 * 300), _z(3 * 300), np.int32(300)],
        0,
    ),
    (
        "softmax_layernorm",
        "softmax_rows_online",
        (3,),
        (256,),
        lambda: [_f32(3 * 300), _z(3 * 300), np.int32(300)],
        0,
    ),
    (
        "softmax_layernorm",
        "rmsnorm_rows",
        (2,),
        (256,),
        lambda: [_f32(2 * 300), _f32(300, 7), _z(2 * 300), np.int32(300), np.float32(1e-5)],
        0,
    ),
    ("warp_ops", "warp_vote_shuffle", (2,), (64,), lambda: [_u32(128), _z(128 * 16, np.uint32)], 0),
    ("warp_ops", "warp_divergent", (2,), (64,), lambda: [_u32(128), _z(128 * 16, np.uint32)], 0),
    ("warp_ops", "warp_partial_exit", (2,), (64,), lambda: [_i32(128), _z(256, np.uint32), np.int32(100)], 0),
    ("bitonic_sort", "bitonic_sort_f32", (2,), (512,), lambda: [_f32(2048)], 0),
    (
        "memory_spaces",
        "dynamic_smem_reverse",
        (4,),
        (256,),
        lambda: [_f32(N), _z(N), _z(N, np.int32), np.int32(N)],
        256 * 8,
    ),
    (
        "memory_spaces",
        "local_array_select",
        (4,),
        (256,),
        lambda: [_i32(8 * N), _z(N, np.int32), np.int32(3), np.int32(N)],
        0,
    ),
    ("control_flow", "switch_dense", (4,), (256,), lambda: [_i32(N, 0, 10), _z(N, np.int32), np.int32(N)], 0),
    ("control_flow", "named_barrier_handoff", (2,), (128,), lambda: [_i32(128), _z(128, np.int32)], 0),
    (
        "memory_ordering",
        "fence_message_passing",
        (4,),
        (32,),
        lambda: [_z(1, np.int32), _z(2, np.int32), _z(4, np.int32)],
        0,
    ),
    (
        "atomics",
        "atomics_scoped_shared",
        (4,),
        (64,),
        lambda: [_i32(256, 0, 100), _z(8, np.int32), _z(1, np.int32), np.int32(256)],
        0,
    ),
    (
        "atomics",
        "atomics_ordered",
        (2,),
        (64,),
        lambda: [_z(1, np.int32), _z(1, np.int32), _z(128, np.int32), np.int32(128)],
        0,
    ),
    (
        "recursion",
        "recursive_gcd",
        (1,),
        (64,),
        lambda: [
            np.arange(1, 65, dtype=np.int64) * 6,
            np.arange(1, 65, dtype=np.int64) * 4,
            _z(64, np.int64),
            np.int32(64),
        ],
        0,
    ),
    (
        "matmul_tiled",
        "matmul_tiled_4x1_f64acc",
        (2, 1),
        (16, 16),
        lambda: [
            _f32(64 * 32),
            _f32(32 * 32, 5),
            _z(64 * 32, np.float64),
            np.int32(64),
            np.int32(32),
            np.int32(32),
        ],
        0,
    ),
    (
        "transpose",
        "transpose_swizzled_f64",
        (2, 2),
        (32, 8),
        lambda: [np.arange(64 * 64, dtype=np.float64), _z(64 * 64, np.float64), np.int32(64), np.int32(64)],
        0,
    ),
    (
        "softmax_layernorm",
        "layernorm_rows",
        (2,),
        (256,),
        lambda: [
            _f32(2 * 300),
            _f32(300, 8),
            _f32(300, 9),
            _z(2 * 300),
            _z(2),
            _z(2),
            np.int32(300),
            np.float32(1e-5),
        ],
        0,
    ),
    ("warp_ops", "warp_match_redux", (2,), (64,), lambda: [_u32(128, 4), _z(128 * 10, np.uint32)], 0),
    (
        "histogram",
        "histogram_bytes_match",
        (2,),
        (128,),
        lambda: [_u32(500, 2**32 - 1).view(np.uint8), _z(256, np.uint32), np.int32(500)],
        0,
    ),
    ("bitonic_sort", "bitonic_sort_kv_desc", (1,), (512,), lambda: [_u32(1024, 10**6), _i32(1024)], 0),
    (
        "atomics",
        "atomics_int",
        (2,),
        (128,),
        lambda: [_i32(256, 0, 1000), _z(13, np.int32), _z(4, np.uint64), _z(256, np.int32), np.int32(250)],
        0,
    ),
    ("memory_ordering", "cache_hint_copies", (4,), (256,), lambda: [_f32(N), _z(5 * N), np.int32(N)], 0),
    ("memory_ordering", "cooperative_tiles", (2,), (128,), lambda: [_i32(256), _z(256 * 3, np.int32)], 0),
    (
        "control_flow",
        "collatz_steps",
        (1,),
        (128,),
        lambda: [_u32(128, 10**5) + 1, _z(128, np.int32), np.int32(128)],
        0,
    ),
    (
        "recursion",
        "recursive_minmax",
        (1,),
        (32,),
        lambda: [_f32(32 * 37), _z(64), np.int32(32), np.int32(37)],
        0,
    ),
    (
        "cp_async_sm80",
        "cp_async_pipeline",
        (2,),
        (64,),
        lambda: [_f32(256 * 6), _z(256 * 6), np.int32(256 * 6)],
        0,
    ),
    (
        "cp_async_sm80",
        "cp_async_zfill",
        (2,),
        (64,),
        lambda: [_f32(512), _z(514), np.int32(4), np.int32(512)],
        0,
    ),
    (
        "ldmatrix",
        "ldmatrix_mma_f16",
        (1,),
        (32,),
        lambda: [_f32(256).astype(np.float16), _f32(128, 4).astype(np.float16), _z(128)],
        0,
    ),
    ("mbarrier_sm80", "mbarrier_block_sync", (3,), (128,), lambda: [_i32(384), _z(384, np.int32)], 0),
    ("mbarrier_sm80", "mbarrier_cp_async_phases", (3,), (64,), lambda: [_i32(384), _z(384, np.int32)], 0),
    (
        "mma_sync",
        "mma_m16n8k16_f16_f32",
        (1,),
        (32,),
        lambda: [_f32(256).astype(np.float16), _f32(128, 3).astype(np.float16), _z(128), _z(128)],
        0,
    ),
]

# Triton-generated sm_80 PTX (tests/corpus/ptx/triton/*.sm_80.ptx): two trailing scratch pointers get None;
# the kernels take their shared memory as dynamic, passed as Triton's launcher would.
TRITON_LAUNCHES = [
    (
        "vector_add_f32",
        "add_kernel",
        (5,),
        (128,),
        lambda: [_f32(5000), _f32(5000, 3), _z(5000), np.int32(5000), None, None],
        0,
    ),
    (
        "fused_softmax",
        "softmax_kernel",
        (6,),
        (256,),
        lambda: [_z(6 * 781), _f32(6 * 781), np.int32(781), np.int32(781), np.int32(781), None, None],
        4096,
    ),
    (
        "layer_norm_fwd_f16",
        "layer_norm_fwd",
        (5,),
        (256,),
        lambda: [
            _f32(5 * 700).astype(np.float16),
            _z(5 * 700, np.float16),
            _f32(700, 4),
            _f32(700, 5),
            _z(5),
            _z(5),
            np.int32(700),
            np.int32(700),
            np.float32(1e-5),
            None,
            None,
        ],
        4096,
    ),
    (
        "row_sum_max",
        "row_sum_max",
        (3,),
        (128,),
        lambda: [_i32(3 * 1300).astype(np.float32), _z(3), _z(3), np.int32(1300), np.int32(1300), None, None],
        4096,
    ),
    (
        "attention_fwd_causal",
        "attn_fwd",
        (2, 2),
        (128,),
        lambda: (
            [_f32(2 * 128 * 64, s).astype(np.float16) for s in (1, 2, 3)]
            + [_z(2 * 128 * 64, np.float16), np.float32(0.125), np.int32(128), None, None]
        ),
        65536,
    ),
]
