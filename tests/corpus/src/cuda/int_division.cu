// Integer division and remainder, including division by zero and INT_MIN / -1.
// archs: all (sm_80 sm_89 sm_90a sm_100a). Launch: 1D, n threads.
// The PTX ISA leaves integer division by zero unspecified (machine-specific, no trap), so a reference
// for y == 0 must come from a GPU run, not from numpy. Columns: q/r for s32, u32, s64, u64.

extern "C" __global__ void int_divmod(const int* a, const int* b, int* qs, int* rs, unsigned* qu, unsigned* ru,
                                      int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i];
    qs[i] = x / y;
    rs[i] = x % y;
    qu[i] = (unsigned)x / (unsigned)y;
    ru[i] = (unsigned)x % (unsigned)y;
}

extern "C" __global__ void int_divmod64(const long long* a, const long long* b, long long* qs, long long* rs,
                                        unsigned long long* qu, unsigned long long* ru, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long x = a[i], y = b[i];
    qs[i] = x / y;
    rs[i] = x % y;
    qu[i] = (unsigned long long)x / (unsigned long long)y;
    ru[i] = (unsigned long long)x % (unsigned long long)y;
}

// Division by compile-time constants (strength-reduced to mulhi/shift sequences by the compiler).
extern "C" __global__ void int_div_by_constants(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i];
    unsigned u = (unsigned)x;
    int* o = out + 8 * i;
    o[0] = x / 7;
    o[1] = x % 7;
    o[2] = x / -3;
    o[3] = (int)(u / 10u);
    o[4] = (int)(u % 1000u);
    o[5] = x / 16;   // signed division by power of two rounds toward zero
    o[6] = x % 16;
    o[7] = (int)(u / 0x80000001u);
}

// Floor division / Python-style modulo built from truncating ops (reference: numpy // and %).
extern "C" __global__ void int_floordiv(const int* a, const int* b, int* q, int* r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i];
    if (y == 0) { q[i] = 0; r[i] = 0; return; }
    int qq = x / y, rr = x % y;
    if (rr != 0 && ((rr < 0) != (y < 0))) { qq -= 1; rr += y; }
    q[i] = qq;
    r[i] = rr;
}
