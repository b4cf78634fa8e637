"""DeepEP V2's closed-form SM estimate (`ElasticBuffer.get_theoretical_num_sms`), restated for comparison.

It assumes a balanced gate (no node limit): a token reaches k_ranks = R(1 - C(E - E/R, k)/C(E, k)) of the
R ranks and k_nodes = N(1 - C(E - E/N, k)/C(E, k)) of the N nodes. Per scale-up copy it counts SM reads
(the token once, the forwarded node copies) and SM writes (one send-buffer copy, the own node's direct copy,
every scale-up copy), IB traffic k_nodes(1 - 1/N)/k_ranks and NVLink traffic 1 - 1/G, takes the slower
link, and asks for max(reads/read_rate, writes/write_rate) x link rate / link traffic SMs, times 1.25,
rounded up to an even number, at least 4. Its own note: not meant for DeepSeek-V3's group-limited gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class V2Estimate:
    sms: int
    sms_exact: float
    bound: str
    expected_rank_topk: float
    expected_node_topk: float


def expected_topk(experts: int, top_k: int, groups: int) -> float:
    """Expected number of distinct groups (of experts/groups experts each) among k uniform distinct picks."""
    per = experts // groups
    return groups * (1 - math.comb(experts - per, top_k) / math.comb(experts, top_k))


def v2_num_sms(experts: int, top_k: int, nodes: int, gpus_per_node: int, scaleout_gbs: float,
               nvlink_gbs: float, sms_per_gpu: int, sm_read_gbs: float = 200.0,
               sm_write_gbs: float = 50.0, factor: float = 1.25, minimum: int = 4) -> V2Estimate:
    ranks = nodes * gpus_per_node
    k = expected_topk(experts, top_k, ranks)
    s = expected_topk(experts, top_k, nodes) if nodes > 1 else 0.0
    reads, writes = 1 / k, 0.0
    if nodes > 1:
        writes += 1 / k + (1 / k) * (s / nodes)
        ib = (1 / k) * s * (1 - 1 / nodes)
        reads += s / k
        writes += 1
        nvl = 1 - 1 / gpus_per_node
    else:
        writes += 1.0
        nvl, ib = 1 - 1 / gpus_per_node, 0.0
    if nodes > 1 and ib / scaleout_gbs > nvl / nvlink_gbs:
        traffic, gbs, bound = ib, scaleout_gbs, "scaleout"
    else:
        traffic, gbs, bound = nvl, nvlink_gbs, "nvlink"
    exact = max(gbs / traffic * reads / sm_read_gbs, gbs / traffic * writes / sm_write_gbs)
    sms = max(minimum, math.ceil(exact * factor))
    sms += sms % 2
    return V2Estimate(min(sms, sms_per_gpu), exact, bound, k, s)
