"""Expert parallelism with DeepEP's normal-mode API over torch.distributed: `import ptxforge.ep as deep_ep`.

    buffer = deep_ep.Buffer(group, 0, 0)                 # gloo (CPU) or NCCL (GPU) process group
    ntr, ntrr, nte, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
        topk_idx=topk_idx, topk_weights=topk_weights)    # x: bf16 [T, H] or (e4m3 [T, H], f32 [T, H/128])
    combined, combined_w, _ = buffer.combine(expert_out, handle, topk_weights=recv_w)
    buffer.stats()                                       # bytes per call, per peer, intra/inter-node

The transport is `all_to_all_single` with uneven splits (payload, scales and metadata packed as bytes into one
row per token, so FP8 crosses gloo as uint8). With several nodes (`num_ranks_per_node`), dispatch goes in two
hops as DeepSeek-V3 does: a token crosses to each destination node once, to the rank with its own local
index, which forwards it inside the node; combine runs the hops backwards, summing per node first.

Bad input is checked on every rank and agreed with one small all_gather before any data moves, so one rank's
bad input raises `EPInputError` on all ranks; every collective waits at most `timeout_s` and then raises
`EPTimeoutError` naming the call, the collective and the ranks it waited for, and (on the default group,
whose rendezvous store each rank marks on entering a call) which ranks never entered that call. Ranks in
different calls (one skipped `combine` and called `get_dispatch_layout`) raise `EPCallMismatchError` naming
each rank's call; a peer whose process died raises `EPPeerLostError` naming it as soon as gloo sees its
connection close (backend="kernels" too, from inside its kernels), and the survivors remove its /dev/shm
segment. docs/failures.md has the whole table.

Differences from DeepEP (V1 normal mode):
- Low-latency mode (`low_latency_mode=True`: `low_latency_dispatch`, `low_latency_combine`,
  `get_next_low_latency_combine_buffer`, `clean_low_latency_buffer`, `get_low_latency_rdma_size_hint`) runs on
  the torch transport only (ptxforge.ep.low_latency; its communication kernels are not built, so
  `backend="kernels"` with it raises). Its rows are ordered by source rank, then token (DeepEP's slots follow
  its atomics' order); unused rows are unspecified (as DeepEP's), their src_info -1; LogFMT is refused;
  rank masking (shrink), `get_local_buffer_tensor` and `get_comm_stream` are absent (V2's `ElasticBuffer` is
  ptxforge.ep.elastic, over this Buffer; its differences are in docs/ep.md);
  `num_nvl_bytes`, `num_qps_per_rank`, `allow_*`, `explicitly_destroy`, `enable_shrink`, `comm` are accepted
  and unused.
- `async_finish=True` (normal mode): the call returns with its work pending and its results filled at the
  event's wait: with the torch backend a combine, a cached dispatch or a dispatch given `num_worst_tokens`
  runs whole on the Buffer's communication thread (agreement and counts included; errors at the wait), any
  other dispatch its data all_to_all on gloo's thread (`previous_event` is waited for before the call,
  unless it is work on that thread, which runs in call order); backend="kernels" on an emulated GPU runs
  its kernels on the device's worker thread, in call order (`previous_event` and the handle's dispatch
  ordered there; a dispatch returns once its notify step gave the counts), on a CUDA GPU on the caller's
  thread. Elsewhere the agreement and count collectives
  stay synchronous. `allocate_on_comm_stream` is accepted and unused (docs/ep.md, "Asynchronous calls").
- `Config` and `set_num_sms` are checked and kept (the handle's channel matrices use `num_sms / 2` channels);
  the torch backend's transport ignores them.
- `get_dispatch_layout` and `dispatch`/`combine` each run a small agreement collective (the price of raising on
  every rank); DeepEP's layout call is local and its dispatch trusts its input.
- Extra keyword arguments: `Buffer(..., num_ranks_per_node=None, backend="torch", timeout_s=60.0)`. Node size
  defaults to $LOCAL_WORLD_SIZE, else min(ranks, 8) as DeepEP's NVLink domain. "torch" moves rows with
  all_to_all_single. `backend="kernels"` computes the layout with the DSL kernel (ptxforge.kernels) and, on one
  node of a gloo group, runs dispatch and combine with the intranode communication kernels
  (ptxforge.kernels.comm: notify, then `num_sms` persistent blocks as num_sms/2 channels of a sender and a
  receiver block, per (channel, peer) rings with .sys head/tail) on an emulated GPU per process whose memory
  the other processes map through emulator IPC handles (ptxforge.emu.ipc). Its results are bit-identical to
  the torch backend's; `Buffer.sm_map()` tells which SM ran which role. Across nodes it uses the torch
  transport for the data; on GPUs (NCCL groups, or CUDA inputs) the buffers are shared by CUDA IPC and the
  kernels run on a green context of num_sms SMs where the driver has them, else on their grid of num_sms
  persistent blocks (`Buffer.sm_budget()` says which; not yet run on a GPU). Config's chunk size and ring
  depth are the kernels' (a combine keeps the channels of the dispatch that made its handle).
  `NodeGroup(node)` (ptxforge.ep.node_group) drives every rank of an emulated `Node` from one process with
  the same kernels, for the node-wide sanitizer.
- `dispatch` computes the layout itself when only `topk_idx` is given (after a `get_dispatch_layout` call has
  fixed num_experts); DeepEP requires the layout arguments.
- Received tokens are ordered by source rank, then source token index, on one node and across nodes (DeepEP's
  internode order differs). The handle is always the 6-field intranode tuple (rank_prefix_matrix,
  channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank, send_head), also across
  nodes where DeepEP returns a 10-field one; channel matrices are inclusive prefix counts over contiguous token
  ranges of ceil(T / channels); send_head holds the token's row in the destination's recv_x (DeepEP: a ring
  buffer slot). Pass the handle back unchanged, as DeepEP programs do.
- `num_worst_tokens` also works across nodes (DeepEP: intranode only); the padding rows are zero with ids -1.
  It fixes the output sizes, but the CPU still waits for the counts (the all_to_all needs its splits).
- Combine sums in f32 in rank order; across nodes each node's partial sum travels back as BF16 (as DeepEP's
  RDMA combine) and the partials are summed in f32, so results can differ from DeepEP's in the last bit.
- FP8 scales may also be packed UE8M0 int32 [T, H/512] (DeepGEMM's SM100 format); they travel as bytes.
- `Buffer.stats()` is new: per-call byte accounting (see ptxforge.ep.stats).
"""

import torch as _torch

from ptxforge.ep.buffer import Buffer, DispatchHandle
from ptxforge.ep.config import Config, EventOverlap
from ptxforge.ep.elastic import ElasticBuffer
from ptxforge.ep.elastic_layout import EPHandle
from ptxforge.ep.errors import CommTimeout, EPCallMismatchError, EPError, EPInputError, EPPeerLostError, EPTimeoutError
from ptxforge.ep.stats import CallStats, Traffic

topk_idx_t = _torch.int64


def __getattr__(name):  # NodeGroup brings the communication kernels (traced on import): only when asked for
    if name == "NodeGroup":
        from ptxforge.ep.node_group import NodeGroup  # heavy: the communication kernels, traced on import

        return NodeGroup
    raise AttributeError(f"module 'ptxforge.ep' has no attribute {name!r}")

__all__ = ["Buffer", "CallStats", "CommTimeout", "Config", "DispatchHandle", "EPCallMismatchError", "EPError",
           "EPHandle", "EPInputError", "EPPeerLostError", "EPTimeoutError", "ElasticBuffer", "EventOverlap",
           "NodeGroup", "Traffic", "topk_idx_t"]
