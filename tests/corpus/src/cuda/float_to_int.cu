// Float <-> integer conversions with explicit rounding and saturation. archs: all (sm_80 sm_89 sm_90a sm_100a)
// PTX cvt to integer saturates out-of-range values and maps NaN to 0. Launch: 1D, n threads.
// out32 is [n, 12] i32/u32 bit patterns, out64 is [n, 6], outf is [n, 8] f32, outd is [n, 2] f64.
// Reference: numpy with clipping to the integer range, NaN -> 0, rounding per column.

extern "C" __global__ void float_to_int_rounding(const float* X, const double* D, int* out32,
                                                 long long* out64, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = X[i];
    double d = D[i];
    int* o = out32 + 12 * i;
    o[0] = __float2int_rn(x);
    o[1] = __float2int_rz(x);
    o[2] = __float2int_ru(x);
    o[3] = __float2int_rd(x);
    o[4] = (int)__float2uint_rn(x);
    o[5] = (int)__float2uint_rz(x);
    o[6] = (int)__float2uint_ru(x);
    o[7] = (int)__float2uint_rd(x);
    o[8] = __double2int_rn(d);
    o[9] = __double2int_rz(d);
    o[10] = (int)__double2uint_ru(d);
    o[11] = (int)x;                        // C cast: cvt.rzi.s32.f32
    long long* p = out64 + 6 * i;
    p[0] = __float2ll_rn(x);
    p[1] = __float2ll_rd(x);
    p[2] = (long long)__float2ull_ru(x);
    p[3] = __double2ll_rz(d);
    p[4] = (long long)__double2ull_rn(d);
    p[5] = (long long)d;
}

extern "C" __global__ void int_to_float_rounding(const int* I, const long long* L, float* outf, double* outd,
                                                 int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int v = I[i];
    long long w = L[i];
    float* o = outf + 8 * i;
    o[0] = __int2float_rn(v);
    o[1] = __int2float_rz(v);
    o[2] = __int2float_ru(v);
    o[3] = __int2float_rd(v);
    o[4] = __uint2float_rn((unsigned)v);
    o[5] = __ll2float_rn(w);
    o[6] = __ll2float_rz(w);
    o[7] = __ull2float_ru((unsigned long long)w);
    outd[2 * i + 0] = __ll2double_rd(w);
    outd[2 * i + 1] = (double)(unsigned long long)w;
}

// Float <-> float: f32 -> f64 widening, f64 -> f32 narrowing with each rounding mode, and rounding to
// integral values in floating point (cvt.rni / rzi / rpi / rmi).
extern "C" __global__ void float_narrowing(const double* D, float* outf, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double d = D[i];
    float* o = outf + 8 * i;
    o[0] = __double2float_rn(d);
    o[1] = __double2float_rz(d);
    o[2] = __double2float_ru(d);
    o[3] = __double2float_rd(d);
    o[4] = (float)rint(d);
    o[5] = nearbyintf((float)d);
    o[6] = roundf((float)d);                  // half away from zero
    o[7] = (float)trunc(d);
}

// Bit reinterpretation (mov.b32 / mov.b64 between float and int registers).
extern "C" __global__ void float_bits(const float* X, const double* D, unsigned* ub, unsigned long long* db,
                                      float* fb, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    ub[i] = __float_as_uint(X[i]);
    db[i] = (unsigned long long)__double_as_longlong(D[i]);
    fb[i] = __int_as_float(__float_as_int(X[i]) ^ 0x80000000);   // negate via sign bit
}
