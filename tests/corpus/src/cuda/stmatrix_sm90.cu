// stmatrix (the store counterpart of ldmatrix). archs: sm_90a sm_100a
// Launch: one warp. Lane l holds register j = in[l * 4 + j] (u32 = two u16: low half first) and supplies
// the address of row (l % 8) of matrix (l / 8) of a 32x8 u16 stack; stmatrix writes row l/4, cols
// 2*(l%4)..+1 of matrix j from lane l's register j (with .trans: rows 2*(l%4)..+1, col l/4).
// out and out_trans are 32x8 u16, row-major. Reference: the inverse of the ldmatrix layout.

extern "C" __global__ void stmatrix_x4(const unsigned* in, unsigned short* out, unsigned short* out_trans) {
    __shared__ __align__(16) unsigned short s[32 * 8];
    __shared__ __align__(16) unsigned short st[32 * 8];
    int lane = threadIdx.x & 31;
    unsigned r0 = in[lane * 4], r1 = in[lane * 4 + 1], r2 = in[lane * 4 + 2], r3 = in[lane * 4 + 3];
    unsigned a = (unsigned)__cvta_generic_to_shared(&s[lane * 8]);
    unsigned at = (unsigned)__cvta_generic_to_shared(&st[lane * 8]);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(a), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(at), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
    __syncwarp();
    for (int i = lane; i < 32 * 8; i += 32) { out[i] = s[i]; out_trans[i] = st[i]; }
}

// x1 and x2 forms: only lanes 0..7 (x1) / 0..15 (x2) supply addresses. out1 is 8x8, out2 16x8 u16.
extern "C" __global__ void stmatrix_x1_x2(const unsigned* in, unsigned short* out1, unsigned short* out2) {
    __shared__ __align__(16) unsigned short s1[8 * 8];
    __shared__ __align__(16) unsigned short s2[16 * 8];
    int lane = threadIdx.x & 31;
    unsigned a1 = (unsigned)__cvta_generic_to_shared(&s1[(lane & 7) * 8]);
    unsigned a2 = (unsigned)__cvta_generic_to_shared(&s2[(lane & 15) * 8]);
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" :: "r"(a1), "r"(in[lane]) : "memory");
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1,%2};"
                 :: "r"(a2), "r"(in[lane]), "r"(in[32 + lane]) : "memory");
    __syncwarp();
    for (int i = lane; i < 64; i += 32) out1[i] = s1[i];
    for (int i = lane; i < 128; i += 32) out2[i] = s2[i];
}
