// Every integer intrinsic, one output column each. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: 1D, n threads total; inputs a, b, c are u32 arrays, a64/b64 are u64 arrays.
// out is [n, 32] u32 and out64 is [n, 4] u64; column meanings are listed at each store.
// Reference: Python integer arithmetic per column (see the CUDA Math API semantics of each intrinsic).

__device__ __forceinline__ unsigned bfe_u32(unsigned x, unsigned pos, unsigned len) {
    unsigned r;
    asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(pos), "r"(len));
    return r;
}
__device__ __forceinline__ int bfe_s32(int x, unsigned pos, unsigned len) {
    int r;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(pos), "r"(len));
    return r;
}
__device__ __forceinline__ unsigned bfi_b32(unsigned ins, unsigned base, unsigned pos, unsigned len) {
    unsigned r;
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(ins), "r"(base), "r"(pos), "r"(len));
    return r;
}
// lop3 with immediate truth tables: 0x96 = a^b^c, 0xe8 = majority(a,b,c), 0xca = a ? b : c (bitwise)
template <int LUT>
__device__ __forceinline__ unsigned lop3(unsigned a, unsigned b, unsigned c) {
    unsigned r;
    asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(a), "r"(b), "r"(c), "n"(LUT));
    return r;
}
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
    unsigned r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

extern "C" __global__ void int_intrinsics(const unsigned* A, const unsigned* B, const unsigned* C,
                                          const unsigned long long* A64, const unsigned long long* B64,
                                          unsigned* out, unsigned long long* out64, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned a = A[i], b = B[i], c = C[i];
    unsigned long long a64 = A64[i], b64 = B64[i];
    unsigned* o = out + 32 * i;
    o[0] = __popc(a);                          // population count
    o[1] = __clz((int)a);                      // leading zeros (32 for 0)
    o[2] = __ffs((int)a);                      // 1-based lowest set bit, 0 for 0
    o[3] = __brev(a);                          // bit reverse
    o[4] = __byte_perm(a, b, c & 0xffff);      // byte select by 4 nibbles of c
    o[5] = __funnelshift_l(a, b, c);           // (b:a << (c & 31)) >> 32
    o[6] = __funnelshift_r(a, b, c);           // (b:a >> (c & 31)) & 0xffffffff
    o[7] = __funnelshift_lc(a, b, c);          // clamp shift to 32
    o[8] = __funnelshift_rc(a, b, c);
    o[9] = (unsigned)__mulhi((int)a, (int)b);  // high 32 bits of signed product
    o[10] = __umulhi(a, b);                    // high 32 bits of unsigned product
    o[11] = __sad((int)a, (int)b, c);          // |a - b| + c (signed difference)
    o[12] = __usad(a, b, c);                   // |a - b| + c (unsigned difference)
    o[13] = (unsigned)__dp4a((int)a, (int)b, (int)c);  // signed 4x8-bit dot + c
    o[14] = __dp4a(a, b, c);                           // unsigned 4x8-bit dot + c
    o[15] = (unsigned)__dp2a_lo((int)a, (int)b, (int)c);  // 2x16 (a) . low 2x8 (b) + c
    o[16] = __vadd2(a, b);                     // per-halfword add (wraps)
    o[17] = __vaddss2(a, b);                   // per-halfword signed saturating add
    o[18] = __vsub4(a, b);                     // per-byte subtract (wraps)
    o[19] = __vabsdiffu4(a, b);                // per-byte |a - b| unsigned
    o[20] = __vmaxu2(a, b);                    // per-halfword unsigned max
    o[21] = __vcmpeq4(a, b);                   // per-byte 0xff where equal
    o[22] = __vavgu4(a, b);                    // per-byte rounded average
    o[23] = bfe_u32(a, b & 31, c & 31);        // unsigned bit-field extract
    o[24] = (unsigned)bfe_s32((int)a, b & 31, c & 31);  // signed bit-field extract (sign-extended)
    o[25] = bfi_b32(a, b, c & 31, (c >> 8) & 31);       // insert low bits of a into b at pos
    o[26] = lop3<0x96>(a, b, c);
    o[27] = lop3<0xe8>(a, b, c);
    o[28] = lop3<0xca>(a, b, c);
    o[29] = prmt(a, b, c);                     // prmt default mode, selector from c
    o[30] = (unsigned)__mul24((int)a, (int)b);   // low 32 bits of 24x24 signed product
    o[31] = __uhadd(a, b);                     // (a + b) >> 1 without overflow
    unsigned long long* o64 = out64 + 4 * i;
    o64[0] = __umul64hi(a64, b64);
    o64[1] = (unsigned long long)__mul64hi((long long)a64, (long long)b64);
    o64[2] = (unsigned long long)__popcll(a64) | ((unsigned long long)__clzll((long long)a64) << 8)
             | ((unsigned long long)__ffsll((long long)a64) << 16);
    o64[3] = __brevll(a64);
}
