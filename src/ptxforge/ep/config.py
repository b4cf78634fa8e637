"""DeepEP's `Config` (performance tunables) and `EventOverlap` (its CUDA event wrapper).

An `EventOverlap` of an `async_finish=True` call holds a `Completion`: the call's data is still moving (its
all_to_all runs on gloo's thread) and the first wait receives it into the tensors the call returned. An event of
a synchronous call holds nothing and waiting on it returns at once. `Config` is kept and checked so that DeepEP
programs run unchanged and the kernel backend can use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Config:
    """DeepEP's `Config(num_sms, nvl_send_chunk, nvl_recv_buf, rdma_send_chunk, rdma_recv_buf)`."""

    num_sms: int = 20
    num_max_nvl_chunked_send_tokens: int = 6
    num_max_nvl_chunked_recv_tokens: int = 256
    num_max_rdma_chunked_send_tokens: int = 6
    num_max_rdma_chunked_recv_tokens: int = 128

    def __post_init__(self):
        if self.num_sms <= 0 or self.num_sms % 2:
            raise ValueError(f"Config.num_sms must be a positive even number (2 SMs a channel), got {self.num_sms}")

    @property
    def num_channels(self) -> int:
        return self.num_sms // 2

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes a DeepEP NVLink buffer would take; the torch backend allocates nothing ahead."""
        return self.num_channels * num_ranks * self.num_max_nvl_chunked_recv_tokens * hidden_bytes * 2

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return self.num_channels * num_ranks * self.num_max_rdma_chunked_recv_tokens * hidden_bytes * 2


# DeepEP's recommended configs by number of ranks (num_sms filled in at call time)
DISPATCH_CONFIGS = {2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128), 16: (36, 288, 20, 128),
                    24: (32, 288, 8, 128), 32: (32, 288, 8, 128), 48: (32, 288, 8, 128), 64: (32, 288, 8, 128),
                    96: (20, 480, 12, 128), 128: (20, 560, 12, 128), 144: (32, 720, 12, 128),
                    160: (28, 720, 12, 128)}
COMBINE_CONFIGS = {2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128), 16: (4, 288, 12, 128),
                   24: (1, 288, 8, 128), 32: (1, 288, 8, 128), 48: (1, 288, 8, 128), 64: (1, 288, 8, 128),
                   96: (1, 480, 8, 128), 128: (1, 560, 8, 128), 144: (2, 720, 8, 128), 160: (2, 720, 8, 128)}


def recommended(table: dict, num_ranks: int, num_sms: int) -> Config:
    """DeepEP's entry for `num_ranks`, or the defaults for other sizes (which DeepEP rejects)."""
    return Config(num_sms, *table[num_ranks]) if num_ranks in table else Config(num_sms)


class Completion:
    """Pending work that `finish` completes (it waits for the data and fills the call's results); run once, at the
    first `wait()`. An error is kept: every later wait raises it again, so no caller reads unfilled results."""

    def __init__(self, call: str, finish: Callable[[], None]) -> None:
        self.call = call
        self._finish: Callable[[], None] | None = finish
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._finish is None and self._error is None

    def wait(self) -> None:
        if self._error is not None:
            raise self._error
        if self._finish is not None:
            finish = self._finish
            try:
                finish()
            except BaseException as e:
                self._error = e
                raise
            finally:
                self._finish = None  # drops what the work held (send rows, inputs)


class EventOverlap:
    """DeepEP's event handle: `current_stream_wait()` (or leaving a `with event:` block) waits for the call's
    pending work, if any, and raises its error (a timeout or lost peer names the call); `extra_tensors` keeps the
    call's inputs alive until then."""

    def __init__(self, event: Any = None, extra_tensors: tuple[Any, ...] | None = None) -> None:
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        try:
            if self.event is not None:
                self.event.wait()
        finally:
            self.extra_tensors = None  # the work has ended, or failed (its send rows are a packed copy)

    def __enter__(self) -> EventOverlap:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.current_stream_wait()
        return False
