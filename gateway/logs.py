"""JSON log lines: one object per line, on stdout, for log shippers.

A record whose message is a dict is merged into the line as fields; anything else
becomes ``message``. Nothing here ever sees request bodies or headers.

The access log (one line per request) is the hot path, so once :func:`configure` has
run it bypasses the ``logging`` machinery: :data:`ACCESS` renders the line itself and
hands it to a :class:`LineWriter`, which a background thread writes out in batches, so
a slow or blocked stdout never stalls the event loop. Every other logger goes through
the same writer, so lines keep their order. Without :func:`configure` (tests, library
use) access lines go through ``logging.getLogger("gateway.access")`` as before.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from math import floor
from typing import Any

import orjson
from aiohttp.http_exceptions import HttpProcessingError
from opentelemetry import trace

_json_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode
_NEWLINE = orjson.OPT_APPEND_NEWLINE


def _dumps_line(fields: Mapping[str, Any]) -> bytes:
    """``fields`` as a JSON object, newline included."""
    # orjson is ~10x faster than the json module on a log line; json stays the fallback
    # for what orjson refuses (integers beyond 64 bits, non-string keys).
    try:
        return orjson.dumps(fields, default=str, option=_NEWLINE)
    except TypeError:
        return _json_dumps(fields).encode() + b"\n"


class _Clock:
    """A line's start up to its second, ``{"ts":"2026-01-02T03:04:05.``, made once a second.
    ``now`` holds (second, prefix) as one tuple, replaced in one assignment and read once per
    line: the log writer's thread and the loop both write lines, and a second and a prefix kept
    apart could be read half turned (a line a second off, in a review's two-thread run)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now: tuple[int, bytes] = (-1, b"")

    def turn(self, second: int) -> tuple[int, bytes]:
        now = self.now = (second, time.strftime('{"ts":"%Y-%m-%dT%H:%M:%S.', time.gmtime(second)).encode())
        return now


_MILLIS = tuple(f"{ms:03d}".encode() for ms in range(1000))  # b"000".."999": a look-up, not a format spec
_clock = _Clock()
# What follows the milliseconds, per (level, logger): both are named in code, so few.
_TAILS: dict[tuple[str, str], bytes] = {}


def _tail(level: str, logger: str) -> bytes:
    tail = _TAILS.get((level, logger))
    if tail is None:
        tail = f'Z","level":"{level}","logger":"{logger}"'.encode()
        if len(_TAILS) < 256:
            _TAILS[(level, logger)] = tail
    return tail


def line(created: float, level: str, logger: str, fields: Mapping[str, Any]) -> bytes:
    """One log line, newline included: the common head, then ``fields`` in order."""
    return _line(created, _tail(level, logger), fields)


def _line(created: float, tail: bytes, fields: Mapping[str, Any]) -> bytes:
    # One join of bytes already made (the second's text, the milliseconds', the level's and
    # the logger's), and math.floor, a third of int()'s cost on a float: the access line went
    # from ~15,800 instructions to ~12,100 (issue #38).
    second = floor(created)
    now = _clock.now
    if now[0] != second:
        now = _clock.turn(second)
    millis = _MILLIS[floor((created - second) * 1000)]
    if not fields:
        return b"".join((now[1], millis, tail, b"}\n"))
    return b"".join((now[1], millis, tail, b",", _dumps_line(fields)[1:]))


def render(created: float, level: str, logger: str, fields: Mapping[str, Any]) -> str:
    """The same line as text, without the newline."""
    return line(created, level, logger, fields)[:-1].decode()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any]
        if isinstance(record.msg, dict):
            fields = dict(record.msg)
        else:
            fields = {"message": record.getMessage()}
        if record.exc_info and record.exc_info[0] is not None:
            fields["exception"] = record.exc_info[0].__name__  # the type only: texts can quote input
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:  # tracing is on and this line is about a request (its span is attached)
            fields.setdefault("trace_id", format(ctx.trace_id, "032x"))
            fields.setdefault("span_id", format(ctx.span_id, "016x"))
        return render(record.created, record.levelname.lower(), record.name, fields)


class LineWriter:
    """Writes whole lines to a file descriptor from a background thread.

    ``write`` only appends to a deque (no lock, no syscall), so the event loop never waits
    on the descriptor. While lines come, the thread wakes every ``flush_s`` (or once
    ``batch_lines`` are pending), joins what is pending and writes it with one ``os.write``.
    Two periods in a row with nothing to write put it to sleep until the next line, which sets
    one event (a syscall only after a quiet spell) and is written at once: an idle gateway does
    not wake 20 times a second, and a lone request's line is not held back. If the descriptor
    stops draining and ``max_lines`` wait, new lines are dropped and counted; a line saying
    how many follows once it drains again. ``close`` writes whatever is left (bounded by a
    timeout) and stops the thread; what it could not write is counted in one line on
    ``report_fd`` (stderr), not on the descriptor that stopped draining.
    """

    def __init__(
        self,
        fd: int,
        *,
        flush_s: float = 0.05,
        batch_lines: int = 256,
        max_lines: int = 100_000,
        atomic_bytes: int | None = None,
        report_fd: int = 2,
    ) -> None:
        self._fd = fd
        self._report_fd = report_fd
        self._atomic = atomic_bytes
        self._flush_s = flush_s
        self._batch = batch_lines
        self._max = max_lines
        self._lines: deque[bytes] = deque()  # append and popleft are atomic: no lock needed
        self.dropped = 0
        self._in_hand = 0  # lines the thread has taken and not yet written (a gap line: those it counts)
        self._wake = threading.Event()
        self._idle = False  # the thread sleeps until a line comes (no timeout)
        self._closed = False
        self.sleeps = 0  # how often it went to sleep idle: for tests
        self._thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
        self._thread.start()

    def write(self, line: bytes) -> None:
        """Queue one complete line (it must end with a newline)."""
        lines = self._lines
        if self._closed:
            self._write_all(line)  # late shutdown lines: straight through
        elif len(lines) >= self._max:
            self.dropped += 1
        else:
            lines.append(line)
            if self._idle:
                self._idle = False
                self._wake.set()  # the first line after a quiet spell
            elif len(lines) >= self._batch and not self._wake.is_set():
                self._wake.set()

    def _take(self) -> list[bytes]:
        lines = self._lines
        out = [lines.popleft() for _ in range(len(lines))]
        self._in_hand = len(out)
        if self.dropped:
            dropped, self.dropped = self.dropped, 0
            gap = {"event": "log_lines_dropped", "count": dropped}
            out.append(line(time.time(), "warning", "gateway.logs", gap))
            self._in_hand += dropped
        return out

    def _write_lines(self, lines: list[bytes]) -> None:
        limit = self._atomic
        if limit is None:
            self._write_all(b"".join(lines))
            self._in_hand = 0
            return
        # A pipe write of at most PIPE_BUF bytes is never interleaved with another process's
        # (POSIX), so with several writers each write is whole lines up to that size.
        batch: list[bytes] = []
        size = 0
        for one in lines:
            if batch and size + len(one) > limit:
                self._write_all(b"".join(batch))
                self._in_hand -= len(batch)  # (a gap line, counting many, is always the last batch's)
                batch, size = [], 0
            batch.append(one)
            size += len(one)
        if batch:
            self._write_all(b"".join(batch))
        self._in_hand = 0

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._fd, view)
            except InterruptedError:
                continue
            except OSError:
                return  # stdout is gone (closed pipe): logging must never take the process down
            view = view[n:]

    def _run(self) -> None:
        quiet = True  # the last period found nothing to write (at start: nothing yet)
        while not self._closed:
            if self._lines or self.dropped:
                self._write_lines(self._take())
                quiet = False
            elif quiet:
                self._idle = True
                # Checked again once idle is published: a line appended before that is seen
                # here, one appended after it sets the event.
                if not self._lines:
                    self.sleeps += 1
                    self._wake.wait()
                self._idle = False
                self._wake.clear()
                continue  # the line that woke it is written at once (or the writer is closed)
            else:
                quiet = True
            self._wake.wait(self._flush_s)
            self._wake.clear()
        # What is left at close is written here, not by ``close``'s caller: a stalled reader
        # then holds up this thread, which ``close`` waits for only so long.
        self.flush()

    def flush(self) -> None:
        """Write what is pending now, from the calling thread (tests, shutdown)."""
        if self._lines or self.dropped:
            self._write_lines(self._take())

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and write what is left; never waits more than ``timeout_s`` (and
        half a second more to say on ``report_fd`` how many lines it had to leave)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.flush()  # a line that came while it stopped
            return
        # The descriptor stopped draining (a stalled reader): the process exits without these
        # lines, and says so where the operator can still look, if that is not stalled too.
        lost = len(self._lines) + self.dropped + self._in_hand
        if lost:
            fields = {"event": "log_lines_lost", "count": lost, "waited_s": timeout_s}
            _try_write(self._report_fd, line(time.time(), "error", "gateway.logs", fields))


def _try_write(fd: int, data: bytes, timeout_s: float = 0.5) -> None:
    """One short line to ``fd`` if it takes it within ``timeout_s`` (stderr may be the same
    stalled pipe): an exit never hangs on it."""
    try:
        if select.select([], [fd], [], timeout_s)[1]:
            os.write(fd, data)  # at most PIPE_BUF bytes: a writable pipe takes it whole
    except (OSError, ValueError):
        pass


class _WriterHandler(logging.Handler):
    """Routes ordinary log records through the same writer as the access log."""

    def __init__(self, writer: LineWriter) -> None:
        super().__init__()
        self._writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._writer.write(self.format(record).encode() + b"\n")
        except Exception:
            self.handleError(record)


class AccessLog:
    """The per-request line. Fast path once configured; stdlib logging otherwise."""

    __slots__ = ("_enabled", "_logger", "_writer")

    def __init__(self) -> None:
        self._logger = logging.getLogger("gateway.access")
        self._writer: LineWriter | None = None
        self._enabled = True

    def use(self, writer: LineWriter | None, enabled: bool = True) -> None:
        self._writer = writer
        self._enabled = enabled

    def emit(self, fields: Mapping[str, Any]) -> None:
        writer = self._writer
        if writer is None:
            self._logger.info(fields)
        elif self._enabled:
            writer.write(_line(time.time(), _ACCESS_TAIL, fields))


ACCESS = AccessLog()
_ACCESS_TAIL = _tail("info", "gateway.access")


class _ClientMistakes(logging.Filter):
    """aiohttp logs a request its parser refused (a malformed header, broken framing) as an
    error, "Error handling request": the client's mistake, answered with a 400 (bad_http.py),
    would trip an operator's error alerts. Logged as a warning instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.levelno >= logging.ERROR and isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def configure(level: str, fd: int | None = None, *, whole_lines: bool = False) -> LineWriter:
    """JSON lines on stdout (or ``fd``) for every logger; the access log's fast path on.
    ``whole_lines``: other processes write to the same descriptor (server.workers), so no
    write may split a line (see :class:`LineWriter`)."""
    if fd is None:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    writer = LineWriter(fd, atomic_bytes=select.PIPE_BUF if whole_lines else None)
    atexit.register(writer.close)
    handler = _WriterHandler(writer)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's own access log would duplicate ours without the contract fields.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _ClientMistakes) for f in server.filters):
        server.addFilter(_ClientMistakes())
    ACCESS.use(writer, enabled=logging.getLogger("gateway.access").isEnabledFor(logging.INFO))
    return writer
