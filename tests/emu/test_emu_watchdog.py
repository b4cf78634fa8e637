"""The single-device watchdog: a repeating state is no progress, slow work that progresses is never
stopped, and the explicit time limit is its own, separately named stop."""

import math
import re
import time

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import LaunchError, TimeLimitExceeded, WatchdogTimeout

HEAD = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 n)
{
.reg .pred %p<4>;
.reg .b32 %r<8>;
.reg .b64 %rd<8>;
"""

# a flag nobody writes: lines 11-13 spin
SPIN = HEAD + """ld.param.u64 %rd1, [out];
$L:
ld.volatile.global.u32 %r1, [%rd1];
setp.eq.u32 %p1, %r1, 0;
@%p1 bra $L;
ret;
}
"""

# a counter loop of n turns, then out[0] = n
COUNT = HEAD + """ld.param.u64 %rd1, [out];
ld.param.u32 %r2, [n];
mov.u32 %r1, 0;
$L:
add.u32 %r1, %r1, 1;
setp.lt.u32 %p1, %r1, %r2;
@%p1 bra $L;
st.global.u32 [%rd1], %r1;
ret;
}
"""

# each thread counts to n * (tid + 1): the warps' lanes diverge for the whole loop
COUNT_DIVERGED = HEAD + """ld.param.u64 %rd1, [out];
ld.param.u32 %r2, [n];
mov.u32 %r3, %tid.x;
add.u32 %r4, %r3, 1;
mul.lo.u32 %r2, %r2, %r4;
mov.u32 %r1, 0;
$L:
add.u32 %r1, %r1, 1;
setp.lt.u32 %p1, %r1, %r2;
@%p1 bra $L;
mul.wide.u32 %rd2, %r3, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r1;
ret;
}
"""

# warp 0 waits at bar.sync 0 (line 13) while warp 1 spins on a flag nobody writes (lines 16-18)
BARRIER_AND_SPIN = HEAD + """ld.param.u64 %rd1, [out];
mov.u32 %r2, %tid.x;
setp.ge.u32 %p2, %r2, 32;
@%p2 bra $SPIN;
bar.sync 0;
ret;
$SPIN:
ld.volatile.global.u32 %r1, [%rd1];
setp.eq.u32 %p1, %r1, 0;
@%p1 bra $SPIN;
bar.sync 0;
ret;
}
"""

# an mbarrier expecting 64 arrivals in a block of 32 threads: its phase never completes (wait at 16-17)
MBARRIER = HEAD.replace(".target sm_80", ".target sm_90").replace(  # mbarrier.try_wait needs sm_90
    "{\n", "{\n.shared .align 8 .b64 bar;\n", 1) + """mov.u32 %r1, %tid.x;
setp.eq.u32 %p1, %r1, 0;
@%p1 mbarrier.init.shared.b64 [bar], 64;
bar.sync 0;
mbarrier.arrive.shared.b64 %rd1, [bar];
$W:
mbarrier.try_wait.shared.b64 %p2, [bar], %rd1;
@!%p2 bra $W;
ret;
}
"""


# warp 0 spins on out[0] (lines 14-16), warp 1 on out[1] in a longer loop (lines 19-22): two diverged spins
TWO_SPINS = HEAD + """ld.param.u64 %rd1, [out];
mov.u32 %r2, %tid.x;
setp.ge.u32 %p2, %r2, 32;
@%p2 bra $B;
$A:
ld.volatile.global.u32 %r1, [%rd1];
setp.eq.u32 %p1, %r1, 0;
@%p1 bra $A;
ret;
$B:
ld.volatile.global.u32 %r1, [%rd1+4];
add.u32 %r3, %r1, 7;
setp.eq.u32 %p1, %r3, 7;
@%p1 bra $B;
ret;
}
"""


def kernel(src):
    return pf.parse(src, filename="w.ptx").kernel("k")


def launch(src, n=0, block=32, **kw):
    out = np.zeros(max(block, 1), np.uint32)
    kernel(src).launch(grid=1, block=block, args=[out, np.uint32(n)], device="emu", options=kw)
    return out


def test_a_spin_on_a_flag_nobody_writes_is_no_progress_naming_its_lines():
    t = time.perf_counter()
    with pytest.raises(WatchdogTimeout) as e:
        launch(SPIN, watchdog_s=0.5)
    assert time.perf_counter() - t < 5
    msg = str(e.value)
    assert "no progress for 0.5 s (watchdog_s)" in msg and "its state repeats" in msg
    assert "looping over w.ptx:11 .. w.ptx:13" in msg and "converged, last at w.ptx:1" in msg
    assert not isinstance(e.value, TimeLimitExceeded)


def test_a_slow_loop_that_progresses_is_never_stopped():
    # far longer than the check interval (watchdog_s / 2), yet it finishes
    t = time.perf_counter()
    assert launch(COUNT, n=150_000, watchdog_s=0.02)[0] == 150_000
    assert time.perf_counter() - t > 0.1  # the watchdog looked at it several times


def test_a_diverged_loop_that_progresses_is_never_stopped():
    out = launch(COUNT_DIVERGED, n=400, block=64, watchdog_s=0.02)
    assert out.tolist() == [400 * (i + 1) for i in range(64)]


def test_the_time_limit_stops_a_long_loop_with_its_own_message():
    t = time.perf_counter()
    with pytest.raises(TimeLimitExceeded) as e:
        launch(COUNT, n=2**31, watchdog_s=0.05, time_limit_s=0.5)
    assert time.perf_counter() - t < 4
    msg = str(e.value)
    assert "ran past its time limit of 0.5 s (time_limit_s)" in msg and "w.ptx:1" in msg
    assert "no progress" not in msg


def test_a_barrier_waiting_on_a_spinning_warp_names_both():
    with pytest.raises(WatchdogTimeout) as e:
        launch(BARRIER_AND_SPIN, block=64, watchdog_s=0.3)
    msg = str(e.value)
    assert "no progress" in msg
    assert "warp 0 waits at barrier 0 w.ptx:13: bar.sync 0" in msg
    assert "warp 1 is at w.ptx:1" in msg  # somewhere in its spin (lines 16-18)


def test_an_mbarrier_phase_nothing_completes_is_no_progress():
    with pytest.raises(WatchdogTimeout) as e:
        launch(MBARRIER, watchdog_s=0.3)
    msg = str(e.value)
    assert "no progress" in msg and "looping over w.ptx:16 .. w.ptx:17" in msg


def test_watchdog_inf_is_off_and_the_time_limit_still_stops():
    with pytest.raises(TimeLimitExceeded):
        launch(SPIN, watchdog_s=math.inf, time_limit_s=0.3)


@pytest.mark.parametrize("option,value", [("watchdog_s", math.nan), ("watchdog_s", -1), ("watchdog_s", 0),
                                          ("time_limit_s", math.nan), ("time_limit_s", -2.0),
                                          ("time_limit_s", 0), ("watchdog_s", "soon")])
def test_bad_limits_are_errors_naming_the_option(option, value):
    with pytest.raises(LaunchError, match=rf"^{option} must be"):
        launch(COUNT, n=1, **{option: value})


def test_bad_limits_are_refused_by_emulate_too():
    from ptxforge.emu import emulate

    mod = pf.parse(COUNT, filename="w.ptx")
    with pytest.raises(LaunchError, match="watchdog_s must be"):
        emulate(mod, mod.kernel("k").function, grid=(1,), block=(1,), params=bytes(16), watchdog_s=math.nan)


def test_cli_time_limit(tmp_path, capsys):
    from ptxforge.cli.main import main

    src = tmp_path / "w.ptx"
    src.write_text(COUNT)
    out = tmp_path / "out.npy"
    rc = main(["run", str(src), "-a", f"{out}=zeros:1:uint32", "-a", "2147483647", "--time-limit", "0.3"])
    err = capsys.readouterr().err
    assert rc != 0 and "time limit of 0.3 s" in err
    rc = main(["run", str(src), "-a", f"{out}=zeros:1:uint32", "-a", "1", "--time-limit", "nan"])
    err = capsys.readouterr().err
    assert rc != 0 and "--time-limit must be a positive number" in err


def test_a_node_refuses_a_bad_watchdog():
    from ptxforge.emu import Node

    with pytest.raises(LaunchError, match="watchdog_s must be"):
        Node(gpus=1, sms=1, watchdog_s=math.nan)


def test_the_check_is_timed_not_counted_in_steps_on_a_large_wave():
    # 64 blocks of 256 threads in one wave: steps are slow, the check still comes within a second or so
    t = time.perf_counter()
    with pytest.raises(WatchdogTimeout, match=r"no progress for 0.3 s .*live warp\(s\) of blocks"):
        kernel(SPIN).launch(grid=64, block=256, args=[np.zeros(1, np.uint32), np.uint32(0)], device="emu",
                            options={"watchdog_s": 0.3})
    assert time.perf_counter() - t < 5


def test_waves_that_repeat_each_others_states_are_progress():
    # 1 SM holds 2 blocks of 1024 threads: 3 waves run the same counter loop through the same states
    out = np.zeros(1, np.uint32)
    k = kernel(COUNT)
    res = k.launch(grid=6, block=1024, args=[out, np.uint32(60_000)], device="emu",
                   options={"num_sms": 1, "watchdog_s": 0.01})
    assert out[0] == 60_000 and res.waves == 3


def test_two_diverged_spins_are_no_progress_naming_each_warp():
    with pytest.raises(WatchdogTimeout) as e:
        launch(TWO_SPINS, block=64, watchdog_s=0.3)
    msg = str(e.value)
    assert "no progress" in msg
    assert re.search(r"warp 0 is at w\.ptx:1[456]: ", msg) and re.search(r"warp 1 is at w\.ptx:(19|2[012]): ", msg)


def test_cli_launches_have_a_default_time_limit(tmp_path, capsys, monkeypatch):
    """A counting loop writes no memory until its end, so the watchdog sees progress; without --time-limit the
    CLI's default limit stops it (shortened here: the real one is CLI_TIME_LIMIT_S)."""
    import ptxforge.cli.run as cli_run
    from ptxforge.cli.main import main
    from ptxforge.emu.progress import CLI_TIME_LIMIT_S

    assert CLI_TIME_LIMIT_S == 600.0
    monkeypatch.setattr(cli_run, "CLI_TIME_LIMIT_S", 0.3)
    src = tmp_path / "w.ptx"
    src.write_text(COUNT)
    out = tmp_path / "out.npy"
    t = time.perf_counter()
    rc = main(["run", str(src), "-a", f"{out}=zeros:1:uint32", "-a", "2147483647"])
    assert rc != 0 and "time limit of 0.3 s" in capsys.readouterr().err
    assert time.perf_counter() - t < 10
    rc = main(["run", str(src), "-a", f"{out}=zeros:1:uint32", "-a", "1000", "--time-limit", "inf"])
    assert rc == 0, capsys.readouterr().err
