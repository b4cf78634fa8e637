"""Kernels written with the DSL: FP8 quantization, DeepSeek-V3 routing, the dispatch layout, permutation,
and the intranode communication kernels (`comm`: notify, dispatch, combine over peer memory).

Each module holds DSL kernels (launchable with `device="emu"` or `"cuda"`) and the numpy references they
are bit-exact against; `ptxforge.kernels.ops` wraps them for torch tensors. The communication kernels'
reference is `ptxforge.ep`'s torch backend, and their host side is `ptxforge.ep.intranode`.
"""
