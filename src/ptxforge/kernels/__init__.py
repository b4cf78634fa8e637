"""Kernels written with the DSL: FP8 quantization, DeepSeek-V3 routing, the dispatch layout, permutation.

Each module holds DSL kernels (launchable with `device="emu"` or `"cuda"`) and the numpy references they
are bit-exact against; `ptxforge.kernels.ops` wraps them for torch tensors.
"""
