"""Every wait of the communication kernels is bounded: a peer that never publishes its tail (the planted
"no_tail" bug) turns the hang into a `CommTimeout` naming the rank, kernel, role, channel and counters, well
before the emulator's own watchdog would stop it; the group works again at the next call."""

import re
import time

import ep_warm  # noqa: F401 - builds the emulator kernels once
import pytest
import torch
from ep_checks import E
from kernel_cases import inputs

from ptxforge.emu import Node
from ptxforge.ep import CommTimeout, Config
from ptxforge.ep.intranode import describe_timeout
from ptxforge.ep.node_group import NodeGroup
from ptxforge.errors import KernelFault
from ptxforge.kernels import comm as K


def _dispatch(group, ins, **kw):
    return group.dispatch([i[0] for i in ins], topk_idx=[i[1] for i in ins], topk_weights=[i[2] for i in ins],
                          num_experts=E, config=Config(2, 6, 16), **kw)


def _timeout_lines(text: str) -> list[str]:
    return re.findall(r"ptxforge\.ep: rank \d+'s \w+ kernel timed out[^;\n]*", text)


def test_a_stopped_peer_times_out_with_a_named_error(capsys):
    node = Node(gpus=2, sms=132, watchdog_s=60)  # the node's watchdog would take 60 s
    group = NodeGroup(node, timeout_s=0.5)
    ins = [inputs(r, "bf16") for r in range(2)]
    t0 = time.perf_counter()
    with pytest.raises(CommTimeout) as err:
        _dispatch(group, ins, bug="no_tail")
    assert time.perf_counter() - t0 < 20
    msg = str(err.value)
    assert isinstance(err.value, KernelFault)
    assert "dispatch kernel timed out" in msg and "channel 0" in msg and "timeout_s = 0.5 s" in msg, msg
    assert "tail" in msg or "head" in msg, msg  # a receiver waiting on tail, or a sender on head
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no emulator traceback chained
    # the kernels' own printf (what a GPU prints before its trap). Both ranks wait, and either may trap first:
    # the other may have filled its record (which the message reports) but not printed it when the node
    # stops. So: the rank that trapped printed its record's line, and the message holds every printed line.
    named = _timeout_lines(msg)
    printed = _timeout_lines(capsys.readouterr().out)
    assert printed and set(printed) <= set(named), (printed, named)
    # the next call starts from a fresh record and completes; its rows match a group that never failed
    again = _dispatch(group, ins)
    fresh = _dispatch(NodeGroup(Node(gpus=2, sms=132, watchdog_s=60)), ins)
    for r in range(2):
        assert torch.equal(again[r][0], fresh[r][0])


def test_the_record_reads_as_the_kernels_printf_line():
    combine_receiver = [K.KERNELS.index("combine") + 1, K.ROLES.index("receiver"), 2, 3, 1, 4, 5, 7, 32]
    assert describe_timeout(combine_receiver) == (
        "ptxforge.ep: rank 2's combine kernel timed out: the receiver of channel 3 waited for rank 1's sender: "
        "tail 4 published, tail 5 needed (block 7, thread 32)")
    barrier = [K.KERNELS.index("notify") + 1, K.ROLES.index("barrier"), 0, 3, 4, 0, 5, 0, 0]
    assert "rank 0's notify kernel timed out at the barrier: 3 of 4 arrivals" in describe_timeout(barrier)
    assert describe_timeout([0] * K.TIMEOUT_WORDS) is None  # no wait timed out
    # every format's conversions are the record's u32 arguments, one per field
    for (kernel, role), fmt in K.TIMEOUT_FORMATS.items():
        assert fmt.count("%") == fmt.count("%u") == len(K.TIMEOUT_ARGS[role]), (kernel, role)
    assert 2 + max(len(a) for a in K.TIMEOUT_ARGS.values()) <= (K.BARRIER_BYTES - K.ERROR_OFF) // 4


def test_a_bad_timeout_is_refused():
    group = NodeGroup(Node(gpus=2, sms=8), timeout_s=0)
    with pytest.raises(ValueError, match="timeout_s must be a positive"):
        _dispatch(group, [inputs(r, "bf16") for r in range(2)])


def _lost_peer_rank(rank: int, world: int) -> str:
    """Real gloo processes on emulated IPC GPUs: rank 1 runs the notify step, then stops (it never launches
    its dispatch kernel); rank 0's kernel waits on it and times out."""
    import torch.distributed as dist

    from ptxforge.ep import Buffer, layout
    from ptxforge.ep import kernel_backend as KB

    buf = Buffer(None, backend="kernels", timeout_s=1.0)
    x, idx, w, _ = inputs(rank, "bf16")
    comm = buf._comm(x)
    _, _, per_expert, in_rank = layout.dispatch_layout(idx, E, world, world)
    gen = KB.start_dispatch(comm, x, None, idx, w, in_rank, per_expert, E, KB.tunables(Config(2, 6, 16)))
    said = "finished"
    if rank == 1:
        next(gen)  # the notify step only
        said = "stopped"
    else:
        t0 = time.perf_counter()
        try:
            KB.drive(gen, comm.device, comm)
        except CommTimeout as e:
            said = f"{time.perf_counter() - t0:.1f} s: {e}"
    dist.barrier()  # rank 1's memory stays mapped until rank 0 is done with it
    buf.destroy()
    return said


def test_a_lost_peer_process_times_out_on_gloo():
    from ptxforge.ep.spawn import run_ranks

    said = run_ranks(_lost_peer_rank, 2, timeout_s=120)
    assert said[1] == "stopped"
    assert "rank 0's dispatch kernel timed out" in said[0] and "timeout_s = 1 s" in said[0], said[0]
    assert "rank 1" in said[0], said[0]  # the peer it waited for
    assert float(said[0].split(" s:")[0]) < 30, said[0]
