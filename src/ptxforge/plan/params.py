"""The named parameters of the cost model, with units in their names, and their checks.

Every field has a default (the `deepseek-v3-h800` preset's value); presets replace some of them and the
command line replaces any (`--tokens 8192`). Where each preset's figure comes from is in `presets.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

# Choices of the string-valued parameters.
CHOICES = {
    "kernel_design": ("deepep-v1", "deepep-v2"),
    "copy_engine": ("ldst", "tma"),
    "sm_layout": ("paired", "pooled"),
    "dispatch_dtype": ("fp8", "bf16"),
    "scale_format": ("fp32", "ue8m0"),
    "attention_dtype": ("bf16", "fp8"),
    "expert_dtype": ("fp8", "bf16"),
}


@dataclass(frozen=True)
class Params:
    """One MoE layer of one micro-batch on one GPU of a cluster, and how its communication kernel works.

    Link bandwidths are per GPU and per direction. Per-SM copy rates are what one SM of the communication
    kernel reads and writes per second with the named copy engine. `experts_per_node` is the number of
    NVLink copies a token makes in each node it reaches (DeepSeek-V3's "3.2 experts per node"; DeepEP sends
    one copy per GPU, so a routing file sets it to the distinct GPUs per node). `nvlink_copies` is the NVLink
    copies a token makes in all (a routing file counts them: the GPUs it reaches in each node other than the one
    with the source's local index, whose copy the forwarder keeps in its own memory). `nodes_per_token`,
    `remote_fraction`, `nvlink_copies` 0 mean: derive them (min(node_limit, nodes); (nodes-1)/nodes;
    node copies x min(experts_per_node, gpus_per_node) x (gpus_per_node-1)/gpus_per_node).
    """

    # cluster
    gpus_per_node: int = 8
    nodes: int = 8
    sms_per_gpu: int = 132
    nvlink_gbs: float = 160.0
    scaleout_gbs: float = 50.0
    scaleout_name: str = "ib"
    nvlink_latency_us: float = 1.0
    scaleout_latency_us: float = 3.0
    # per-SM copy rates (GB/s): ld/st and TMA (cp.async.bulk)
    copy_engine: str = "ldst"
    ldst_read_gbs: float = 20.6
    ldst_write_gbs: float = 20.6
    tma_read_gbs: float = 200.0
    tma_write_gbs: float = 50.0
    # communication kernel
    kernel_design: str = "deepep-v1"
    sm_layout: str = "paired"
    sm_granularity: int = 2
    min_sms: int = 2
    headroom: float = 1.0
    chunk_tokens: int = 8
    # model and routing
    tokens: int = 4096
    hidden: int = 7168
    top_k: int = 8
    experts: int = 256
    node_limit: int = 4
    experts_per_node: float = 3.2
    nodes_per_token: float = 0.0
    remote_fraction: float = 0.0
    nvlink_copies: float = 0.0
    imbalance: float = 1.0
    dispatch_dtype: str = "fp8"
    scale_format: str = "fp32"
    scale_block: int = 128
    meta_bytes: int = 72
    # compute (roofline, or measured times that replace it)
    fp8_tflops: float = 1979.0
    bf16_tflops: float = 989.0
    gemm_efficiency: float = 0.78
    attention_efficiency: float = 0.6
    expert_dtype: str = "fp8"
    attention_dtype: str = "bf16"
    moe_intermediate: int = 2048
    shared_experts: int = 1
    attention_gflop_per_token: float = 0.54
    expert_us: float = 0.0
    attention_us: float = 0.0
    backward_ratio: float = 2.0
    # pipeline (DualPipe)
    pp: int = 16
    micro_batches: int = 32
    layers_per_stage: int = 4

    def __post_init__(self) -> None:
        for name, options in CHOICES.items():
            if getattr(self, name) not in options:
                raise ValueError(f"{name} must be one of {', '.join(options)}, got {getattr(self, name)!r}")
        positive = ("gpus_per_node", "nodes", "sms_per_gpu", "nvlink_gbs", "ldst_read_gbs", "ldst_write_gbs",
                    "tma_read_gbs", "tma_write_gbs", "sm_granularity", "tokens", "hidden", "top_k", "experts",
                    "scale_block", "fp8_tflops", "bf16_tflops", "gemm_efficiency", "attention_efficiency",
                    "moe_intermediate", "pp", "micro_batches", "layers_per_stage", "headroom", "imbalance",
                    "chunk_tokens", "experts_per_node")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        nonneg = ("scaleout_gbs", "nvlink_latency_us", "scaleout_latency_us", "min_sms", "node_limit",
                  "nodes_per_token", "remote_fraction", "nvlink_copies", "meta_bytes", "shared_experts",
                  "attention_gflop_per_token", "expert_us", "attention_us", "backward_ratio")
        for name in nonneg:
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.scaleout_name == "nvlink" or not self.scaleout_name.isidentifier():
            raise ValueError(f"scaleout_name must be a short name other than 'nvlink' (ib, roce, efa), "
                             f"got {self.scaleout_name!r}")
        if self.nodes > 1 and self.scaleout_gbs <= 0:
            raise ValueError(f"scaleout_gbs must be > 0 with {self.nodes} nodes")
        if self.experts % (self.gpus_per_node * self.nodes):
            raise ValueError(f"experts ({self.experts}) must divide evenly over {self.gpus_per_node * self.nodes} "
                             f"GPUs")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed experts ({self.experts})")
        if self.remote_fraction > 1:
            raise ValueError(f"remote_fraction must be <= 1, got {self.remote_fraction}")
        if self.nodes_per_token > self.nodes:
            raise ValueError(f"nodes_per_token ({self.nodes_per_token}) cannot exceed nodes ({self.nodes})")
        if self.backward_ratio < 1:
            raise ValueError(f"backward_ratio must be >= 1 (backward = input + weight gradients), got "
                             f"{self.backward_ratio}")
        if self.sms_per_gpu < 2 * self.sm_granularity:
            raise ValueError(f"sms_per_gpu ({self.sms_per_gpu}) must be at least 2 x sm_granularity "
                             f"({self.sm_granularity})")
        if self.hidden % self.scale_block:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of scale_block ({self.scale_block})")
        if self.sm_layout == "paired" and self.sm_granularity % 2:
            raise ValueError("sm_layout 'paired' needs an even sm_granularity")
        if self.micro_batches < 2 * self.pp or self.pp % 2 or self.micro_batches % 2:
            raise ValueError(f"DualPipe needs an even pp and an even micro_batches >= 2*pp, got pp={self.pp}, "
                             f"micro_batches={self.micro_batches}")

    def with_(self, **changes: Any) -> Params:
        """A copy with some parameters changed (checked again)."""
        return replace(self, **changes)

    # --- derived quantities -------------------------------------------------------------------------
    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def dispatch_bytes_per_copy(self) -> int:
        """Bytes one token copy carries in dispatch: values, scales (FP8 only) and metadata."""
        if self.dispatch_dtype == "bf16":
            return 2 * self.hidden + self.meta_bytes
        scale = 4 if self.scale_format == "fp32" else 1
        return self.hidden + (self.hidden // self.scale_block) * scale + self.meta_bytes

    @property
    def combine_bytes_per_copy(self) -> int:
        """Bytes one token copy carries back in combine (BF16 values and metadata)."""
        return 2 * self.hidden + self.meta_bytes

    @property
    def node_copies(self) -> float:
        """Nodes a token reaches (one scale-out copy each, the own node's copy stays local)."""
        if self.nodes_per_token:
            return self.nodes_per_token
        limit = self.node_limit or self.nodes
        return float(min(limit, self.nodes, self.top_k))

    @property
    def remote_share(self) -> float:
        """Share of a token's node copies that leave its node."""
        if self.remote_fraction:
            return self.remote_fraction
        return (self.nodes - 1) / self.nodes

    @property
    def nvlink_copies_per_token(self) -> float:
        """NVLink copies a token makes (each to a GPU of a node it reaches other than the forwarding one)."""
        if self.nvlink_copies:
            return self.nvlink_copies
        fanout = min(self.experts_per_node, float(self.gpus_per_node))
        return self.node_copies * fanout * (self.gpus_per_node - 1) / self.gpus_per_node

    @property
    def sm_read_gbs(self) -> float:
        return self.ldst_read_gbs if self.copy_engine == "ldst" else self.tma_read_gbs

    @property
    def sm_write_gbs(self) -> float:
        return self.ldst_write_gbs if self.copy_engine == "ldst" else self.tma_write_gbs


PARAM_NAMES = tuple(f.name for f in fields(Params))
PARAM_TYPES = {f.name: type(getattr(Params(), f.name)) for f in fields(Params)}
