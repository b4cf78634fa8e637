"""Tiled shared-memory matmul: C[M, N] = A[M, K] @ B[K, N] in f32, TILE x TILE threads per block.

Each block stages a TILE x TILE tile of A and of B in shared memory per step along K (zero-filled past
the edges), synchronises, and accumulates TILE fused multiply-adds per thread.
"""

from ptxforge.dsl import bar_sync, ctaid, f32, fma, guard, kernel, ld, mad, ptr, range_, reg, shared, st, tid, u32

ARCHS = ("sm_80", "sm_90a")


@kernel(arch="sm_80")
def matmul(a: ptr(f32), b: ptr(f32), c: ptr(f32), M: u32, N: u32, K: u32, TILE=16):
    tile_a = shared(f32, (TILE, TILE), name="tile_a")
    tile_b = shared(f32, (TILE, TILE), name="tile_b")
    tx, ty = tid.x, tid.y
    row = mad(ctaid.y, TILE, ty)
    col = mad(ctaid.x, TILE, tx)
    a_row, b_col = tile_a[ty, 0], tile_b[0, tx]  # loop-invariant addresses; k folds into offsets
    acc = reg.f32(0.0)
    va, vb = reg.f32(), reg.f32()
    for k0 in range_(0, K, TILE):
        ka, kb = k0 + tx, k0 + ty
        va.set(0.0)
        with guard((row < M) & (ka < K)):
            ld(a[mad(row, K, ka)], out=va)
        vb.set(0.0)
        with guard((kb < K) & (col < N)):
            ld(b[mad(kb, N, col)], out=vb)
        st(tile_a[ty, tx], va)
        st(tile_b[ty, tx], vb)
        bar_sync()
        for k in range(TILE):  # unrolled: constant shared-memory offsets
            fma(ld(a_row + k), ld(b_col + k * TILE), acc, out=acc)
        bar_sync()
    with guard((row < M) & (col < N)):
        st(c[mad(row, N, col)], acc)


if __name__ == "__main__":
    import numpy as np

    M, N, K = 40, 24, 50
    A, B = np.random.rand(M, K).astype(np.float32), np.random.rand(K, N).astype(np.float32)
    C = np.zeros((M, N), np.float32)
    matmul.launch(grid=((N + 15) // 16, (M + 15) // 16), block=(16, 16),
                  args=[A, B, C, np.uint32(M), np.uint32(N), np.uint32(K)], device="emu")
    print("max error:", np.abs(C - A @ B).max())
