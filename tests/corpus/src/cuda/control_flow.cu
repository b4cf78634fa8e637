// Control flow shapes: switch jump tables, indirect calls through device function pointers (.callprototype),
// early-exit loops, goto, divergent nested branches, and a loop with a data-dependent trip count.
// archs: all (sm_80 sm_89 sm_90a sm_100a). Launch: 1D, n threads. Reference: the same code in Python.

__device__ __noinline__ int op_add(int a, int b) { return a + b; }
__device__ __noinline__ int op_sub(int a, int b) { return a - b; }
__device__ __noinline__ int op_mul(int a, int b) { return a * b; }
__device__ __noinline__ int op_xor(int a, int b) { return a ^ b; }
typedef int (*binop_t)(int, int);
__device__ binop_t binop_table[4] = {op_add, op_sub, op_mul, op_xor};

// out[i] = binop_table[sel[i] & 3](a[i], b[i]) through an indirect call.
extern "C" __global__ void indirect_call(const int* sel, const int* a, const int* b, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    binop_t f = binop_table[sel[i] & 3];
    out[i] = f(a[i], b[i]);
}

// Dense switch (jump table / brx.idx candidates) with fallthrough and default.
extern "C" __global__ void switch_dense(const int* sel, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int s = sel[i], r = 0;
    switch (s) {
        case 0: r = 10; break;
        case 1: r = 11; break;
        case 2: r = 12;   // fallthrough
        case 3: r += 13; break;
        case 4: r = 14; break;
        case 5: r = 15; break;
        case 6: r = -1; break;
        case 7: r = s * s; break;
        case 9: r = 99; break;
        default: r = -s; break;
    }
    out[i] = r;
}

// Collatz steps (data-dependent trip count, capped at 1000): out[i] = steps to reach 1 from x[i] >= 1.
extern "C" __global__ void collatz_steps(const unsigned* x, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long v = x[i];
    int steps = 0;
    while (v != 1 && steps < 1000) {
        v = (v & 1) ? 3 * v + 1 : v >> 1;
        ++steps;
    }
    out[i] = steps;
}

// Linear search with early exit and goto: out[i] = first index j of row i (8 ints) with row[j] == key[i],
// or -1. Nested divergent branches classify the result.
extern "C" __global__ void search_goto(const int* rows, const int* key, int* out, int* cls, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int j = 0, found = -1;
    const int* row = rows + 8 * i;
again:
    if (j < 8) {
        if (row[j] == key[i]) { found = j; goto done; }
        ++j;
        goto again;
    }
done:
    out[i] = found;
    if (found < 0) cls[i] = 0;
    else if (found < 4) cls[i] = (found & 1) ? 1 : 2;
    else cls[i] = (found == 7) ? 3 : 4;
}

// Named barriers (bar.sync / bar.arrive with thread counts): warps 0-1 produce, warps 2-3 consume.
// Launch: blockDim.x = 128. out[b*64 + t] = in[b*64 + t] * 2 for t < 64.
extern "C" __global__ void named_barrier_handoff(const int* in, int* out) {
    __shared__ int buf[64];
    int t = threadIdx.x;
    if (t < 64) {
        buf[t] = in[blockIdx.x * 64 + t] * 2;
        asm volatile("bar.arrive 1, 128;" ::: "memory");     // signal: 64 producers + 64 consumers
    } else {
        asm volatile("bar.sync 1, 128;" ::: "memory");
        out[blockIdx.x * 64 + (t - 64)] = buf[t - 64];
    }
}

// Explicit jump table with brx.idx and a .branchtargets list (nvcc itself rarely emits these).
// out[i] = {100, 200, 300, 400}[sel[i] & 3] + sel[i].
extern "C" __global__ void brx_jump_table(const unsigned* sel, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned s = sel[i];
    int r;
    asm volatile(
        "{\n"
        " .reg .u32 idx;\n"
        " and.b32 idx, %1, 3;\n"
        " TS_%=: .branchtargets C0_%=, C1_%=, C2_%=, C3_%=;\n"
        " brx.idx idx, TS_%=;\n"
        "C0_%=:\n mov.u32 %0, 100;\n bra.uni END_%=;\n"
        "C1_%=:\n mov.u32 %0, 200;\n bra.uni END_%=;\n"
        "C2_%=:\n mov.u32 %0, 300;\n bra.uni END_%=;\n"
        "C3_%=:\n mov.u32 %0, 400;\n"
        "END_%=:\n"
        "}\n" : "=r"(r) : "r"(s));
    out[i] = r + (int)s;
}
