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
