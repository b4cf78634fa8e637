"""The pieces that tell a dead peer from a slow one, without a process group: process liveness (a zombie is
dead), gloo's lost-connection messages, the agreement message's fixed size, /dev/shm segments of dead owners."""

import os
import time

import pytest

from ptxforge.ep.transport import _agreement_blob, _read_agreement
from ptxforge.processes import connection_lost, exited, process_exists


@pytest.fixture
def zombie():
    """The pid of a child that has exited and is not reaped yet (as a SIGKILLed rank whose launcher still
    waits for its siblings)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    for _ in range(500):  # bounded: until the child has exited (state Z)
        if not process_exists(pid):
            break
        time.sleep(0.01)
    yield pid
    os.waitpid(pid, 0)


def test_a_zombie_counts_as_exited(zombie):
    assert process_exists(os.getpid())
    assert not process_exists(zombie)
    assert exited([os.getpid(), zombie], wait_s=0) == [zombie]
    assert exited([os.getpid()], wait_s=0.05) == []  # bounded, also when none has exited


def test_a_dead_owners_segment_is_swept(zombie):
    from ptxforge.emu.ipc import segment as S

    name = f"{S.PREFIX}{zombie}-r0-test{os.getpid()}"
    with open(S.path_of(name), "wb") as f:
        f.write(b"\0" * 64)
    mine = f"{S.PREFIX}{os.getpid()}-r0-test"
    with open(S.path_of(mine), "wb") as f:
        f.write(b"\0" * 64)
    try:
        assert name in S.sweep() and name not in S.live_segments()
        assert mine in S.live_segments()  # a live owner's segment stays
    finally:
        for n in (name, mine):
            if os.path.exists(S.path_of(n)):
                os.unlink(S.path_of(n))


def test_lost_connections_are_told_from_timeouts():
    assert connection_lost(RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:45476."))
    assert connection_lost(RuntimeError("[pair.cc:537] Read error [127.0.0.1]:1425: Connection reset by peer."))
    assert not connection_lost(RuntimeError("Timed out waiting 10000ms for recv operation to complete"))


def test_every_calls_agreement_message_has_one_size():
    layout = _agreement_blob("get_dispatch_layout", 3, {"num_experts": 32}, "")
    combine = _agreement_blob("combine", 3, {"hidden": 256, "handle_serial": 2, "with_weights": 1, "serial": 4},
                              "x must be torch.bfloat16")
    assert len(layout) == len(combine)  # gloo aborts the process on collectives of different sizes
    call, serial, vals, text, (_, pid) = _read_agreement(combine)
    assert (call, serial, vals[:4], text, pid) == ("combine", 3, (256, 2, 1, 4), "x must be torch.bfloat16",
                                                    os.getpid())


def test_ranks_in_different_calls_are_named_with_their_call_numbers():
    from ptxforge.ep.errors import EPCallMismatchError, EPInputError
    from ptxforge.ep.transport import _same_call

    def read(*calls):
        return [_read_agreement(_agreement_blob(name, n, {}, "")) for name, n in calls]

    _same_call(read(("combine", 5), ("combine", 5)))  # the same call: nothing to say
    with pytest.raises(EPCallMismatchError) as err:
        _same_call(read(("combine", 5), ("get_dispatch_layout", 5), ("combine", 5)))
    assert isinstance(err.value, EPInputError)  # caught where bad input is
    assert ("ranks 0, 2 called combine (call 5 of this Buffer); rank 1 called get_dispatch_layout (call 5 of "
            "this Buffer)") in str(err.value)
    with pytest.raises(EPCallMismatchError, match=r"rank 0 called dispatch \(call 3 .*rank 1 called dispatch "
                                                  r"\(call 4 of this Buffer\)"):
        _same_call(read(("dispatch", 3), ("dispatch", 4)))  # one rank made a call the other skipped
