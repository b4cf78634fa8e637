"""Device printf as a GPU's printf: C's formats (star widths and precisions included, checked against the host
C library's snprintf) and a bounded per-launch buffer whose overflow is counted and warned about, never a
string as long as a hostile width asks for."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import time
import warnings

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.device_printf import PRINTF_FIFO_SIZE, PrintfTruncated
from ptxforge.emu.errors import LaunchError
from ptxforge.emu.launch import EmuDevice

LIBC = ctypes.util.find_library("c")

# vprintf(fmt, args) with both pointers taken from the kernel's parameters
PRINTF = """.version 8.5
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.visible .entry k(.param .u64 fmt, .param .u64 args)
{
.reg .b32 %r<2>;
.reg .b64 %rd<3>;
ld.param.u64 %rd1, [fmt];
ld.param.u64 %rd2, [args];
{
.param .b64 param0;
st.param.b64 [param0], %rd1;
.param .b64 param1;
st.param.b64 [param1], %rd2;
.param .b32 retval0;
call.uni (retval0), vprintf, (param0, param1);
ld.param.b32 %r1, [retval0];
}
ret;
}
"""


def pack(*args: int | float | bytes) -> np.ndarray:
    """Arguments as nvcc packs them for vprintf: ints as 4 bytes, floats as doubles, each aligned to its size."""
    out = b""
    for a in args:
        raw = struct.pack("<d", a) if isinstance(a, float) else struct.pack("<i", a) if isinstance(a, int) else a
        out += bytes(-len(out) % len(raw)) + raw
    return np.frombuffer(out + bytes(8), np.uint8).copy()


def device_printf(fmt: str, *args: int | float, threads: int = 1, device: EmuDevice | None = None):
    """(lines printed, LaunchResult) of `threads` threads each calling printf(fmt, *args)."""
    lines: list[str] = []
    fmt_bytes = np.frombuffer(fmt.encode() + b"\0", np.uint8).copy()
    r = pf.parse(PRINTF).kernel("k").launch(grid=1, block=threads, args=[fmt_bytes, pack(*args)], device="emu",
                                            options={"printf": lines.append}, emu_device_=device)
    return lines, r


def c_printf(fmt: str, *args: int | float) -> str:
    """What the host C library's printf makes of the same format and arguments."""
    libc = ctypes.CDLL(LIBC)
    buf = ctypes.create_string_buffer(4096)
    cargs = [ctypes.c_double(a) if isinstance(a, float) else ctypes.c_int(a) for a in args]
    libc.snprintf(buf, ctypes.c_size_t(len(buf)), fmt.encode(), *cargs)
    return buf.value.decode()


FORMATS = [
    ("[%*d]", 5, 42), ("[%-*d]", 5, 42), ("[%*d]", -5, 42), ("[%.*f]", 2, 3.14159), ("[%.*f]", -1, 3.14159),
    ("[%*.*f]", 8, 3, 2.5), ("[%.*d]", 4, 7), ("[%*.*d|%s]", 6, 3, -7, "after"), ("[%.*e]", 3, 12345.678),
    ("[%#o %#x %#x %#X]", 8, 255, 0, 171), ("[%05.3d|%-6.2d|%+d|% d]", 7, 3, 5, 5),
    ("[%hhd %hu %hhx]", 300, 70000, -1), ("[%.0d|%.d|%x|%u|%+u]", 0, 0, -1, -1, 5),
    ("[%.f %.0f %.1f]", 2.5, 3.5, 0.05), ("[%08.2f|%-8.2f|%+.3e]", -3.14159, 2.5, 1e-10),
    ("[%g %G %#g %10.4g]", 1e-10, 1e20, 1.0, 3.14159), ("[%f %F %e]", float("inf"), float("-inf"), float("nan")),
    ("[%010.2f|%-10e|%a]", float("inf"), 1.5, 1.5), ("[%a|%a|%A|%a|%+a]", 0.0, -0.75, float("inf"), 1.0, 2.0),
    ("[%5c|%-3c|%c]", 97, 98, 99), ("[%%|%5%|%d%%]", 50),
]


@pytest.mark.skipif(LIBC is None, reason="no C library to compare with")
@pytest.mark.parametrize("fmt_args", FORMATS, ids=[f[0] for f in FORMATS])
def test_formats_render_as_c_printf_renders_them(fmt_args):
    fmt, *args = fmt_args
    strings = [a for a in args if isinstance(a, str)]
    if strings:  # a %s argument: the device reads it from a device pointer; the C library takes a char *
        args = [a for a in args if not isinstance(a, str)]
        lines = _with_string(fmt, args, strings[0])
        expected = c_printf(fmt.replace("%s", strings[0]), *args)
    else:
        lines, _ = device_printf(fmt, *args)
        expected = c_printf(fmt, *args)
    assert "".join(lines) == expected


def _with_string(fmt: str, args: list, text: str) -> list[str]:
    """printf(fmt, *args, text) with the string in device memory: its pointer goes last in the packed args."""
    lines: list[str] = []
    dev = EmuDevice()
    s = pf.runtime.empty(len(text) + 1, np.uint8, device=dev)
    s.copy_from(np.frombuffer(text.encode() + b"\0", np.uint8))
    raw = pack(*args)[:-8].tobytes()
    raw += bytes(-len(raw) % 8) + struct.pack("<Q", s.address)
    fmt_bytes = np.frombuffer(fmt.encode() + b"\0", np.uint8).copy()
    pf.parse(PRINTF).kernel("k").launch(grid=1, block=1, args=[fmt_bytes, np.frombuffer(raw, np.uint8).copy()],
                                        device="emu", options={"printf": lines.append}, emu_device_=dev)
    return lines


def test_a_star_width_as_large_as_an_int_fills_the_buffer_and_no_more():
    t = time.perf_counter()
    with pytest.warns(PrintfTruncated, match=r"1,048,576-byte printf buffer .*\(4 printf call\(s\) cut short or lost"):
        lines, r = device_printf("%*d", 2**31 - 1, 5, threads=4, device=EmuDevice())  # the default size
    assert sum(len(s) for s in lines) == PRINTF_FIFO_SIZE and set("".join(lines)) == {" "}
    assert r.printf_truncated == 4
    assert time.perf_counter() - t < 10


@pytest.mark.parametrize("fmt,args", [("%999999999d|", (7,)), ("%.999999999f|", (1.0,)), ("%-999999999s|", ()),
                                      ("%.999999999e|", (2.0,)), ("%0999999999x|", (255,))])
def test_huge_widths_and_precisions_cost_only_what_the_buffer_holds(fmt, args):
    dev = EmuDevice(printf_fifo_size=300)
    t = time.perf_counter()
    with pytest.warns(PrintfTruncated):
        lines, r = device_printf(fmt, *args, threads=32, device=dev)
    assert time.perf_counter() - t < 10
    assert sum(len(s.encode()) for s in lines) == 300 and r.printf_truncated == 32


def test_the_buffer_size_is_a_device_option_and_overflow_keeps_the_first_bytes():
    dev = EmuDevice(printf_fifo_size=100)
    with pytest.warns(PrintfTruncated, match="100-byte printf buffer"):
        lines, r = device_printf("0123456789abcdef\n", threads=10, device=dev)
    assert "".join(lines) == "0123456789abcdef\n" * 5 + "0123456789abcde"
    assert r.printf_truncated == 5  # the sixth call was cut, four more were lost
    dev.printf_fifo_size = 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # output that fits warns of nothing
        lines, r = device_printf("0123456789abcdef\n", threads=10, device=dev)
    assert len(lines) == 10 and r.printf_truncated == 0


@pytest.mark.parametrize("value", [-1, 2**62, 1.5, "1", True])
def test_a_bad_buffer_size_is_an_error_naming_the_option(value):
    with pytest.raises(LaunchError, match="printf_fifo_size must be a whole number of bytes"):
        EmuDevice(printf_fifo_size=value)
    with pytest.raises(LaunchError, match="printf_fifo_size must be a whole number of bytes"):
        EmuDevice().printf_fifo_size = value
