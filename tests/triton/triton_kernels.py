"""Triton kernels for the front-door tests, written from the descriptions of Triton's tutorials (vector add,
fused softmax, matrix multiplication, low-memory dropout, layer norm forward) plus two with planted bugs."""

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def add_kernel_bad_mask(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets <= n  # BUG: one element past the end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    # each program takes rows start, start + step, ... and keeps one whole row in registers
    start = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(start, n_rows, step):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # grouped ordering of the output tiles, a K loop of tile products accumulated in fp32
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * grid_n
    first_m = (pid // in_group) * GROUP_M
    group_size = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_size
    pid_n = (pid % in_group) // group_size
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        acc = tl.dot(tl.load(a, mask=rk[None, :] < left, other=0.0), tl.load(b, mask=rk[:, None] < left, other=0.0),
                     acc)
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c = c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
    # the mask comes from a counter-based generator (Philox) seeded per call: nothing to store for backward
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    keep = tl.rand(seed, offsets) > p
    tl.store(out_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


@triton.jit
def layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
    # one program per row, the row walked in BLOCK-wide chunks: mean, then variance, then the affine output
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * tl.load(W + cols, mask=mask) + tl.load(B + cols, mask=mask)
        tl.store(Y + cols, y, mask=mask)


@triton.jit
def racy_shift_kernel(x_ptr, n, BLOCK: tl.constexpr):
    # BUG: every program reads its neighbour's block while that program overwrites it
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    nxt = tl.load(x_ptr + offsets + BLOCK, mask=offsets + BLOCK < n, other=0.0)
    tl.store(x_ptr + offsets, nxt, mask=offsets < n)


@triton.jit
def uniform_kernel(out_ptr, n, seed, BLOCK: tl.constexpr):
    # the raw stream behind low-memory dropout: one Philox draw per offset
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.rand(seed, offsets), mask=offsets < n)


@triton.jit
def locked_partial_sum_kernel(X, Partial, Lock, N, GROUP: tl.constexpr, BLOCK: tl.constexpr):
    # layer-norm backward's reduction: each row adds itself to one of GROUP partial rows under a spin lock
    # (atomic_cas to take it, atomic_xchg to give it back); the first row of a group stores, the others add
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask)
    lock = Lock + row % GROUP
    count = lock + GROUP
    out = Partial + (row % GROUP) * N + cols
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    if tl.load(count) == 0:
        tl.atomic_xchg(count, 1)
    else:
        x += tl.load(out, mask=mask)
    tl.store(out, x, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(lock, 0)
