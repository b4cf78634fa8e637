"""Bit-exact PTX instruction semantics as pure numpy functions (the emulator's executable spec).

Convention: every function takes and returns numpy arrays of RAW BITS, one element per lane: uint8/16/32/64
of the PTX type width (.pred: bool arrays; packed x2 types: uint32 with element 0 in the low half).
Scalars broadcast. Type names are PTX spellings with or without the dot ('s32' or '.s32'); modifiers are
keyword arguments named as in PTX (rnd='rn'|'rz'|'rm'|'rp', ftz, sat, relu, satfinite, NaN, abs, ...).

Modules
- integer:    add sub (sat, u16x2/s16x2), add_cc sub_cc (carry chains: returns (d, carry_out); sub's
              flag is the carry of a + ~b + 1, i.e. 1 when no borrow, as the hardware keeps it),
              mul (mode lo|hi|wide), mad (lo|hi|wide, sat, cc, carry_in),
              mul24 mad24, sad, div rem, min max (relu, 16x2), abs neg, dp4a dp2a
- bitops:     lop3 (bool_op, q -> (d, p)), bfe bfi brev prmt (mode None or one of the ISA table's prmt
              modes), popc clz bfind (shiftamt) fns bmsk szext (and/or/xor/not/cnot, shl/shr, shf: ops_alu)
- floating:   add sub mul fma/mad (f32, f64, f32x2; rnd rn|rz|rm|rp; ftz; sat), div (rnd also
              'approx'|'full'), rcp (rnd also 'approx'; f64 approx = rcp.approx.ftz.f64), sqrt,
              add_mixed sub_mixed fma_mixed (.f32 with .f16/.bf16 operands), ftz32
- float_misc: min max (c third input, NaN, xorsign_abs, abs, relu, ftz), abs neg copysign testp
- half:       add sub mul fma neg abs min max on f16 / f16x2 / bf16 / bf16x2 (ftz, sat, relu, NaN,
              xorsign_abs), f32_to_bf16_rn, f64_to_bf16_rn
- compare:    compare, setp -> (p, q), set_, selp, slct
- convert:    cvt(a, dst, src, rnd, *, b, e, f, sat, relu, ftz, satfinite, rbits), cvt_pack
- approx:     approx(op, a, ty, ftz) and ex2 lg2 rsqrt sin cos tanh (rcp/sqrt .approx live in floating)
- atomic:     apply(op, old, b, ty, c=None, space='global'|'shared') -> new memory value
- mma:        mma_sync(shape, a, b, c, atype, btype, ctype, dtype, satfinite) on [32, nregs] fragments,
              fragment_coords, pack_fragment, unpack_fragment, ldmatrix, stmatrix, movmatrix,
              ldmatrix_address_lanes
- wmma:       load, store, mma (+ fragment_shape, element_offsets) with a documented element mapping
              (the manual leaves wmma fragment contents unspecified)
- video:      scalar (vadd vsub vabsdiff vmin vmax), shift (vshl vshr), vset, vmad, simd (2/4-way
              vadd vsub vavrg vabsdiff vmin vmax vset with .sat, .add, masks and selectors)
- formats:    FloatFormat descriptors (F64 F32 F16 BF16 TF32 E4M3 E5M2 E2M3 E3M2 E2M1), decode, encode
              (one correct rounding from float64 in any mode), round_fraction (exact rationals),
              two_sum, two_prod, round_to_odd, fix_directed

Choices where the manual leaves the value to the machine (measured NVIDIA behaviour where known):
- integer x/0 and x%0 give all ones (u32 0xffffffff, s32 -1); INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0.
- NaN results: f32 0x7fffffff, f16/bf16 0x7fff; f64 keeps the first NaN operand's payload (quieted),
  else 0x7fffffffffffffff; cvt and min/max give the canonical NaN of the destination format.
- .ftz flushes subnormal inputs, and results that are subnormal after rounding; .sat maps NaN and every
  negative result (-0.0 included) to +0.0; .relu maps negative results (-0.0 included) to +0.0.
- Approximate ops (ex2, lg2, rcp/sqrt/rsqrt .approx, sin, cos, tanh, div.full) return the correctly
  rounded value, which is inside every bound the manual states; div.approx is a * rcp(b) with the
  reciprocal flushed when subnormal, as the manual describes.
- mma: exact products summed in float64, rounded once to the accumulator type; .f64 mma chains fma.
"""
