"""Presets: clusters and kernel designs, every figure with where it comes from.

`Params()`'s defaults are the deepseek-v3-h800 preset; the others change some fields. SOURCES names the
source of each figure; "assumed" marks a figure that is our estimate, not a published number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptxforge.errors import Error
from ptxforge.plan import calibration
from ptxforge.plan.params import PARAM_TYPES, Params

V3 = "DeepSeek-V3 technical report (arXiv 2412.19437)"
V3_CFG = "DeepSeek-V3 model config (config.json on Hugging Face: moe_intermediate_size, n_shared_experts)"
DEEPEP = "DeepEP README (deepseek-ai/DeepEP, normal kernels benchmark setting)"
DEEPEP_V1 = "DeepEP V1 kernels (csrc/kernels/legacy/internode.cu: even SMs forward, odd SMs send and receive)"
DEEPEP_V2 = "DeepEP V2 ElasticBuffer.get_theoretical_num_sms defaults (deep_ep/buffers/elastic.py)"
NCCL_SM90 = ("assumed: NCCL's SM90_NVLINK_BW = 20.6 GB/s (src/graph/topo.h), the bandwidth NCCL budgets "
             "per channel (one SM) on a Hopper NVLink; to be replaced by scripts/calibrate_copy.py")
H100 = "NVIDIA H100/H800 SXM datasheet (dense FP8 1,979 TFLOPS, BF16 989 TFLOPS, 132 SMs)"

# Figures of the default (deepseek-v3-h800) preset.
SOURCES_V3 = {
    "gpus_per_node": f"{V3}, 3.1: 8 GPUs per node on NVLink/NVSwitch",
    "nodes": f"{V3}, 3.2: 64-way expert parallelism over 8 nodes",
    "sms_per_gpu": H100,
    "nvlink_gbs": f"{V3}, 3.2.2: NVLink 160 GB/s",
    "scaleout_gbs": f"{V3}, 3.2.2: IB 50 GB/s (CX7 400 Gb/s)",
    "scaleout_name": "InfiniBand",
    "nvlink_latency_us": "assumed (order of a remote NVLink store + flag round trip)",
    "scaleout_latency_us": "assumed (order of one RDMA write + completion through one switch)",
    "copy_engine": (f"{DEEPEP_V1}: each warp moves one token at a time (ld/st for senders, a one-token TMA "
                    f"load then store for forwarders and receivers), latency-bound like a warp copy"),
    "ldst_read_gbs": NCCL_SM90,
    "ldst_write_gbs": NCCL_SM90,
    "tma_read_gbs": DEEPEP_V2,
    "tma_write_gbs": DEEPEP_V2,
    "kernel_design": DEEPEP_V1,
    "sm_layout": DEEPEP_V1,
    "sm_granularity": "DeepEP Buffer.set_num_sms: an even number (2 SMs per channel)",
    "min_sms": "one channel",
    "headroom": "none: the model asks for exactly the copy rate the link needs",
    "chunk_tokens": "DeepEP EP64 dispatch config (20, 32, 288, 8, 128): RDMA send chunk of 8 tokens",
    "tokens": f"{DEEPEP}: 4096 tokens per batch per GPU",
    "hidden": f"{V3}: hidden 7168",
    "top_k": f"{V3}: 8 routed experts per token",
    "experts": f"{V3}: 256 routed experts",
    "node_limit": f"{V3}, 2.1.2: each token goes to at most 4 nodes",
    "experts_per_node": f"{V3}, 3.2.2: 3.2 experts per node (NVLink 160 / IB 50), the report's design point",
    "nodes_per_token": "derived: min(node_limit, nodes, top_k)",
    "remote_fraction": "derived: (nodes-1)/nodes of the node copies leave the node",
    "nvlink_copies": "derived: node copies x min(experts_per_node, gpus_per_node) x (gpus_per_node-1)/gpus_per_node; "
                     "a routing file counts them",
    "imbalance": "assumed balanced (1.0); a routing file or generated scores measure it",
    "dispatch_dtype": f"{V3}, 3.3.4: FP8 dispatch",
    "scale_format": "DeepEP dispatch takes FP32 scales [N, H/128] (ue8m0 packs them into 1 byte)",
    "scale_block": f"{V3}, 3.3.2: 1x128 activation tiles",
    "meta_bytes": "assumed: 8 B source metadata + top_k x (4 B index + 4 B weight) per copy",
    "fp8_tflops": H100,
    "bf16_tflops": H100,
    "gemm_efficiency": "DeepGEMM's 1,550 TFLOPS on H800 / 1,979 peak = 0.78",
    "attention_efficiency": "assumed (FlashAttention-3 class kernels reach 60-75% of BF16 peak on H100)",
    "expert_dtype": f"{V3}, 3.3: FP8 GEMMs",
    "attention_dtype": "assumed BF16 (the core attention; projections run in FP8 in the report)",
    "moe_intermediate": f"{V3_CFG}: 2048",
    "shared_experts": f"{V3_CFG}: 1",
    "attention_gflop_per_token": ("assumed estimate from the V3 config: MLA projections ~187M weights x 2 "
                                  "FLOP + causal attention over 4K context ~0.17 GFLOP = 0.54 GFLOP/token"),
    "expert_us": "0: use the roofline",
    "attention_us": "0: use the roofline",
    "backward_ratio": "assumed: backward = 2 x forward GEMM FLOPs",
    "pp": f"{V3}, 3.2: 16-way pipeline parallelism",
    "micro_batches": "assumed: 2 x pp (DualPipe's minimum)",
    "layers_per_stage": f"{V3}: 61 layers over 16 stages = 3.8, rounded to 4",
}


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    changes: dict
    sources: dict  # field -> source, for the fields this preset sets (the rest: SOURCES_V3)

    @property
    def params(self) -> Params:
        return Params(**self.changes)

    def source(self, name: str) -> str:
        found = measured_source(self.name) if name in measured(self.name) else None
        return found or self.sources.get(name) or SOURCES_V3[name]


_V2_KERNEL = {"kernel_design": "deepep-v2", "copy_engine": "tma", "sm_layout": "pooled"}
_V2_SOURCES = {"kernel_design": DEEPEP_V2 + ": one send copy, direct writes, no receiver copy",
               "copy_engine": DEEPEP_V2 + ": TMA copies, 200 GB/s read and 50 GB/s write per SM",
               "sm_layout": DEEPEP_V2 + ": every SM does every job"}

PRESETS: dict[str, Preset] = {
    "deepseek-v3-h800": Preset(
        "deepseek-v3-h800", "DeepSeek-V3 training: EP64 over 8 H800 nodes, DeepEP V1 kernels", {}, {}),
    "deepep-v2": Preset(
        "deepep-v2", "the same cluster with DeepEP V2's kernel and per-SM assumptions", dict(_V2_KERNEL),
        dict(_V2_SOURCES)),
    "h200": Preset(
        "h200", "DeepSeek-V3 on 8 H200 nodes (NVLink 4, one CX7 400 Gb/s NIC per GPU), DeepEP V1 kernels",
        {"nvlink_gbs": 450.0},
        {"nvlink_gbs": "NVIDIA H200 datasheet: NVLink 900 GB/s bidirectional = 450 GB/s per direction",
         "scaleout_gbs": "ConnectX-7 400 Gb/s per GPU = 50 GB/s",
         "sms_per_gpu": "NVIDIA H200 (GH100, 132 SMs)",
         "fp8_tflops": "NVIDIA H200 datasheet: 1,979 TFLOPS FP8 dense",
         "bf16_tflops": "NVIDIA H200 datasheet: 989 TFLOPS BF16 dense",
         "ldst_read_gbs": NCCL_SM90 + " (not measured on the H200 yet)",
         "ldst_write_gbs": NCCL_SM90 + " (not measured on the H200 yet)"}),
    "b200": Preset(
        "b200", "DeepSeek-V3 on 8 B200 nodes (NVLink 5, one CX8 800 Gb/s NIC per GPU), DeepEP V1 kernels",
        {"sms_per_gpu": 148, "nvlink_gbs": 900.0, "scaleout_gbs": 100.0, "fp8_tflops": 4500.0,
         "bf16_tflops": 2250.0, "ldst_read_gbs": 40.1, "ldst_write_gbs": 40.1},
        {"sms_per_gpu": "NVIDIA B200 (148 SMs)",
         "nvlink_gbs": "NVIDIA B200 datasheet: NVLink 5 1.8 TB/s bidirectional = 900 GB/s per direction",
         "scaleout_gbs": "ConnectX-8 800 Gb/s per GPU = 100 GB/s",
         "fp8_tflops": "NVIDIA HGX B200 datasheet: 4.5 PFLOPS FP8 dense per GPU",
         "bf16_tflops": "NVIDIA HGX B200 datasheet: 2.25 PFLOPS BF16 dense per GPU",
         "ldst_read_gbs": "assumed: NCCL's SM100_NVLINK_BW = 40.1 GB/s per channel (src/graph/topo.h)",
         "ldst_write_gbs": "assumed: NCCL's SM100_NVLINK_BW = 40.1 GB/s per channel (src/graph/topo.h)",
         "gemm_efficiency": "assumed equal to DeepGEMM's H800 figure (0.78)"}),
}


class UnknownPreset(Error, KeyError):
    def __str__(self) -> str:
        return self.args[0]


def measured(name: str) -> dict:
    """Copy rates scripts/calibrate_copy.py recorded for preset `name` (empty if none)."""
    entry = calibration.MEASURED.get(name, {})
    return {k: v for k, v in entry.items() if k in PARAM_TYPES and v}


def measured_source(name: str) -> str | None:
    e = calibration.MEASURED.get(name)
    return f"measured on {e['device']} on {e['date']} by {e['how']}" if e else None


def preset(name: str, **overrides: Any) -> Params:
    """The parameters of preset `name` (with any measured copy rates), with `overrides` applied;
    KeyError lists the presets."""
    if name not in PRESETS:
        raise UnknownPreset(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return Params(**{**PRESETS[name].changes, **measured(name), **overrides})
