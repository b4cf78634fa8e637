"""PTX with vector registers by bare names, as call arguments and as `.reg .vN` parameters (ptxas 13.0
accepts each): shared by tests/ptx (validation) and tests/emu (running it)."""

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"

BARE = HEAD + """.visible .entry k(.param .u64 out)
{
    .reg .v4 .u32 temp;
    .reg .v2 .u16 x16_0;
    .reg .b32 s;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 temp.x, 7;
    mov.u32 temp.a, 9;
    mov.b32 s, temp.w;
    mov.u16 x16_0.x, 5;
    st.global.u32 [%rd1], s;
    st.b16 [%rd1+4], x16_0.x;
    st.global.v4.u32 [%rd1+16], temp;
    ret;
}
"""

CALLS = HEAD + """.func (.reg .v2 .u32 r) impl(.reg .v2 .u32 a)
{
    add.u32 r.x, a.x, a.y;
    sub.u32 r.y, a.x, a.y;
    ret;
}
.func (.reg .b32 s) sum4(.reg .v4 .u16 h)
{
    .reg .b32 t<4>;
    cvt.u32.u16 t0, h.x;
    cvt.u32.u16 t1, h.g;
    cvt.u32.u16 t2, h.z;
    cvt.u32.u16 t3, h.w;
    add.u32 t0, t0, t1;
    add.u32 t2, t2, t3;
    add.u32 s, t0, t2;
    ret;
}
.visible .entry k(.param .u64 out)
{
    .reg .v2 .u32 temp;
    .reg .v4 .u16 h;
    .reg .b32 s;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    ld.global.v2.u32 temp, [%rd1];
    call (temp), impl, (temp);
    st.global.v2.u32 [%rd1], temp;
    ld.global.v4.u16 h, [%rd1+16];
    call (s), sum4, (h);
    st.global.u32 [%rd1+8], s;
    ret;
}
"""

# a register passed for (or receiving) a `.reg` parameter shaped otherwise but as wide: a scalar for a vector,
# a vector for a scalar, a vector of another element count (ptxas 13.0 accepts each and assembles this
# kernel; it crashes, signal 11, on some such calls, e.g. when the scalar is the very register an
# ld.global wrote, so each goes through an add)
MIXED = HEAD + """.func (.reg .v2 .u16 r) swap(.reg .v2 .u16 a)
{
    mov.b16 r.x, a.y;
    mov.b16 r.y, a.x;
    ret;
}
.func (.reg .b32 s) sum4(.reg .v4 .u16 h)
{
    .reg .b32 t<4>;
    cvt.u32.u16 t0, h.x;
    cvt.u32.u16 t1, h.y;
    cvt.u32.u16 t2, h.z;
    cvt.u32.u16 t3, h.w;
    add.u32 t0, t0, t1;
    add.u32 t2, t2, t3;
    add.u32 s, t0, t2;
    ret;
}
.func (.reg .b64 d) twice(.reg .b64 x)
{
    add.u64 d, x, x;
    ret;
}
.func (.reg .v2 .u32 r) impl(.reg .v2 .u32 a)
{
    add.u32 r.x, a.x, a.y;
    sub.u32 r.y, a.x, a.y;
    ret;
}
.visible .entry k(.param .u64 out)
{
    .reg .b32 s;
    .reg .f32 f;
    .reg .b64 %rd<3>;
    .reg .v2 .u32 v;
    .reg .v4 .u16 h;
    ld.param.u64 %rd1, [out];
    ld.global.b32 s, [%rd1];
    add.u32 s, s, 1;
    call (s), swap, (s);
    st.global.b32 [%rd1], s;
    ld.global.b64 %rd2, [%rd1+8];
    add.u64 %rd2, %rd2, 1;
    call (s), sum4, (%rd2);
    st.global.b32 [%rd1+4], s;
    ld.global.v2.u32 v, [%rd1+16];
    call (v), twice, (v);
    st.global.v2.u32 [%rd1+16], v;
    ld.global.v4.u16 h, [%rd1+24];
    call (%rd2), impl, (h);
    st.global.b64 [%rd1+24], %rd2;
    ld.global.f32 f, [%rd1+32];
    add.f32 f, f, 0f3F800000;
    call (f), swap, (f);
    st.global.f32 [%rd1+32], f;
    ret;
}
"""
