"""The corpus all-to-all (tests/corpus/src/cuda/node_all_to_all.cu, nvcc PTX) on 2, 4 and 8 emulated GPUs."""

from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge import runtime as rt
from ptxforge.emu import Node

PTX = Path(__file__).resolve().parents[1] / "corpus" / "ptx" / "cuda"


def all_to_all(path: Path, world: int, chunk: int, rounds: int = 1, sanitize: bool = False):
    """Run `rounds` all-to-alls on a node of `world` GPUs; check every received chunk against numpy."""
    k = pf.parse_file(path).kernel("node_all_to_all")
    node = Node(gpus=world, sms=16, sanitize=sanitize)
    recv = [rt.empty(world * chunk, np.int32, device=d) for d in node.devices]
    flags = [rt.empty(world, np.int32, device=d) for d in node.devices]
    addrs = np.asarray([b.address for b in recv], np.uint64)
    faddrs = np.asarray([b.address for b in flags], np.uint64)
    recv_ptrs = [rt.to_device(addrs, device=d) for d in node.devices]
    flag_ptrs = [rt.to_device(faddrs, device=d) for d in node.devices]
    streams = [d.stream(sms=range(0, 4)) for d in node.devices]
    token = np.arange(world * chunk, dtype=np.int32).reshape(world, chunk)
    for tag in range(1, rounds + 1):
        # sender r's chunk j, token i: r * 1_000_000 + j * 1000 + i + tag (each value says where it came from)
        send = [(r * 1_000_000 + token + tag * 7).astype(np.int32) for r in range(world)]
        outs = [np.zeros(world * chunk, np.int32) for _ in range(world)]
        pend = [k.launch((world,), (128,), [send[r], recv_ptrs[r], flag_ptrs[r], outs[r], np.int32(r),
                                            np.int32(world), np.int32(chunk), np.int32(tag)],
                         device=d, stream=streams[r]) for r, d in enumerate(node.devices)]
        node.synchronize()
        for r in range(world):
            want = np.stack([send[j][r] for j in range(world)]).reshape(-1)
            np.testing.assert_array_equal(outs[r], want, err_msg=f"GPU {r}, round {tag}")
            res = pend[r].result()
            assert res.per_sm[:4].all() if world >= 4 else res.per_sm[:world].all()
            assert not res.per_sm[4:].any()
    return node


@pytest.mark.parametrize("world", [2, 4, 8])
def test_all_to_all_on_emulated_gpus_matches_numpy(world):
    all_to_all(PTX / "node_all_to_all.sm_90a.O3.ptx", world, chunk=96)


def test_all_to_all_debug_build_two_rounds_under_the_sanitizer():
    all_to_all(PTX / "node_all_to_all.sm_90a.G.ptx", 4, chunk=40, rounds=2, sanitize=True)


def test_all_to_all_is_clean_under_the_node_sanitizer():
    all_to_all(PTX / "node_all_to_all.sm_90a.O3.ptx", 4, chunk=64, sanitize=True)


def test_a_flag_that_never_waits_is_a_race_named_by_its_cuda_source_lines():
    """ring_exchange (nvcc -lineinfo) with every flag already at the tag: no GPU waits for its sender."""
    from importlib import resources

    from ptxforge.emu.sanitizer import SanitizerError

    text = (resources.files("ptxforge") / "data" / "node_demo.sm_90a.ptx").read_text()
    k = pf.parse(text, filename="node_demo.sm_90a.ptx").kernel("ring_exchange")
    node = Node(gpus=2, sms=8, sanitize=True)
    n, blocks = 512, 2
    recv = [rt.empty(n, np.int32, device=d) for d in node.devices]
    flags = [rt.to_device(np.full(blocks, 7, np.uint32), device=d) for d in node.devices]  # tag 7 already set
    for r, d in enumerate(node.devices):
        nx = 1 - r
        k.launch((blocks,), (64,), [np.full(n, r, np.int32), recv[nx], flags[nx], flags[r], recv[r],
                                    np.zeros(n, np.int32), np.int32(n), np.uint32(7)], device=d, stream=d.stream())
    with pytest.raises(SanitizerError) as e:
        node.synchronize()
    rep = e.value.reports[0]
    assert rep.kind == "race" and {rep.gpu, rep.other["gpu"]} == {0, 1}
    lines = {rep.source, rep.other["source"]}
    assert all(s and s.startswith("node_demo.cu:") for s in lines), lines
    assert "node_demo.cu:" in str(e.value)


def barrier_exchange(world: int, release: int, rounds: int = 2):
    """node_barrier_exchange on `world` GPUs for `rounds` rounds; returns the node's first error or None."""
    from ptxforge.emu.sanitizer import SanitizerError

    k = pf.parse_file(PTX / "node_all_to_all.sm_90a.O3.ptx").kernel("node_barrier_exchange")
    node = Node(gpus=world, sms=8, sanitize=True)
    chunk = 48
    recv = [rt.empty(world * chunk, np.int32, device=d) for d in node.devices]
    recv_ptrs = [rt.to_device(np.asarray([b.address for b in recv], np.uint64), device=d) for d in node.devices]
    counter = rt.empty(1, np.uint32, device=node.devices[0])
    token = np.arange(world * chunk, dtype=np.int32).reshape(world, chunk)
    for rnd in range(1, rounds + 1):
        send = [(r * 1_000_000 + token + rnd).astype(np.int32) for r in range(world)]
        outs = [np.zeros(world * chunk, np.int32) for _ in range(world)]
        for r, d in enumerate(node.devices):
            k.launch((1,), (128,), [send[r], recv_ptrs[r], counter, outs[r], np.int32(r), np.int32(world),
                                    np.int32(chunk), np.uint32(rnd), np.int32(release)], device=d, stream=d.stream())
        try:
            node.synchronize()
        except SanitizerError as e:
            return e
        for r in range(world):  # the emulator's order is sequentially consistent: the data is right anyway
            np.testing.assert_array_equal(outs[r], np.stack([send[j][r] for j in range(world)]).reshape(-1))
    return None


def test_barrier_across_the_node_with_release_reductions_is_clean():
    assert barrier_exchange(4, release=1) is None


def test_barrier_across_the_node_with_relaxed_reductions_is_a_race():
    e = barrier_exchange(4, release=0, rounds=1)
    assert e is not None
    rep = e.reports[0]
    assert rep.kind == "race" and rep.gpu != rep.other["gpu"] and "no release/acquire pair at .sys" in rep.message
