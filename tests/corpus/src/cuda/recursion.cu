// Recursion through __noinline__ device functions (real .func calls with a call stack). archs: all
// (sm_80 sm_89 sm_90a sm_100a). Launch: 1D, any shape; out[i] = f(in[i]). Reference: Python recursion.

__device__ __noinline__ unsigned fib(unsigned n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

__device__ __noinline__ unsigned long long factorial(unsigned n) {
    return n <= 1 ? 1ull : n * factorial(n - 1);
}

// Ackermann-lite: gcd by recursion with two arguments and a 64-bit return
__device__ __noinline__ long long gcd_rec(long long a, long long b) {
    return b == 0 ? (a < 0 ? -a : a) : gcd_rec(b, a % b);
}

// Mutual recursion: is_even / is_odd
__device__ __noinline__ bool is_odd(unsigned n);
__device__ __noinline__ bool is_even(unsigned n) { return n == 0 ? true : is_odd(n - 1); }
__device__ __noinline__ bool is_odd(unsigned n) { return n == 0 ? false : is_even(n - 1); }

// Recursive float function with a struct return passed by value
struct Pair { float lo, hi; };
__device__ __noinline__ Pair minmax_rec(const float* v, int n) {
    if (n == 1) return Pair{v[0], v[0]};
    int h = n / 2;
    Pair a = minmax_rec(v, h), b = minmax_rec(v + h, n - h);
    return Pair{fminf(a.lo, b.lo), fmaxf(a.hi, b.hi)};
}

// in[i] in [0, 24]: fib_out[i] = fib(in[i]); fact_out[i] = in[i]! (mod 2^64); parity[i] = in[i] is even
extern "C" __global__ void recursive_fib_fact(const unsigned* in, unsigned* fib_out,
                                              unsigned long long* fact_out, int* parity, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = in[i];
    fib_out[i] = fib(v);
    fact_out[i] = factorial(v);
    parity[i] = is_even(v) ? 1 : 0;
}

extern "C" __global__ void recursive_gcd(const long long* a, const long long* b, long long* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gcd_rec(a[i], b[i]);
}

// out[2*r], out[2*r+1] = min, max of row r of x[rows, cols] (one thread per row)
extern "C" __global__ void recursive_minmax(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    Pair p = minmax_rec(x + (size_t)r * cols, cols);
    out[2 * r] = p.lo;
    out[2 * r + 1] = p.hi;
}
