"""``server.workers: N``: N processes serving one port, so one machine uses all its cores.

The supervisor binds N listening sockets to the same address with SO_REUSEPORT (the kernel
spreads new connections over them evenly) and starts N workers, each a fresh
``llm-gateway --config PATH`` that inherits one socket. Measured against one socket shared by
all workers in bench/RESULTS.md. The supervisor serves no traffic itself:

- it holds the sockets, so a worker that dies is restarted on the same socket and the
  connections queued on it meanwhile are served, not refused;
- it checks that nothing else listens on the port first (SO_REUSEPORT would otherwise let a
  second gateway join the first one's port without a word);
- SIGTERM/SIGINT are passed to every worker, each drains as a single gateway does
  (``server.drain_s``), and the supervisor exits 0 once all have. The supervisor lets go of
  its copies of the sockets at the signal (no worker is started after it), so each socket
  leaves the port's group the moment its own worker stops listening, and the workers still
  draining take the new connections;
- SIGHUP is passed to every worker, each reloads the config on its own (gateway/reload/);
  the supervisor keeps the sockets it bound, so host, port and workers need a restart;
- the supervisor checks the file as the workers do on SIGHUP (and on a watched change), and
  keeps the text of the last one that loads: a worker it restarts starts from that text, so a
  file the workers refused never reaches a restarted worker (gateway/workers/seat.py);
- a worker that exits on its own is restarted after a second; one that keeps dying within
  seconds of its start (a crash loop) stops the whole gateway with exit status 1, so an
  orchestrator sees the failure instead of a half-serving machine, unless another worker is
  serving: then it is retried, less and less often, and the healthy ones serve on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from gateway import __version__
from gateway.auth import startup_check
from gateway.config import ConfigError, GatewayConfig, counted_per_worker, parse_config, read_config_text
from gateway.listening import ListenError, cannot_listen, forget_address, record_address
from gateway.reload.reloader import digest
from gateway.reload.restart_only import pin
from gateway.reload.watch import watch
from gateway.workers.seat import ENV, WorkerSeat

log = logging.getLogger("gateway.workers")

RESTART_DELAY_S = 1.0
# A worker that exits this soon after starting, this many times in a row, is a crash loop.
EARLY_EXIT_S = 10.0
EARLY_EXITS_TO_GIVE_UP = 3
# A crash-looping worker beside healthy ones: retried after 2, 4, ... seconds, at most this.
RETRY_MAX_S = 60.0


def bind_sockets(host: str, port: int, count: int) -> list[list[socket.socket]]:
    """``count`` groups of listening sockets, one per address ``host`` resolves to, all on one
    port (the first bound decides it when ``port`` is 0)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ListenError(f"cannot resolve {host}: {e.strerror}") from None
    addresses = list(dict.fromkeys((info[0], info[4]) for info in infos))
    groups: list[list[socket.socket]] = [[] for _ in range(count)]
    try:
        for family, sockaddr in addresses:
            if port != 0:
                _refuse_if_taken(family, sockaddr)
            for group in groups:
                s = socket.socket(family, socket.SOCK_STREAM)
                group.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind(sockaddr)
                if port == 0:  # the rest of the group, and the other addresses, join this port
                    port = s.getsockname()[1]
                    sockaddr = (sockaddr[0], port, *sockaddr[2:])
                s.listen(1024)
                s.set_inheritable(True)
    except OSError as e:
        for group in groups:
            for s in group:
                s.close()
        raise cannot_listen(host, port, e) from None
    return groups


def _refuse_if_taken(family: int, sockaddr: tuple[object, ...]) -> None:
    # Without SO_REUSEPORT this bind fails if anything listens there, a SO_REUSEPORT group included.
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        probe.bind(sockaddr)
    finally:
        probe.close()


class InForce:
    """The config text the workers run, kept in a file a restarted worker starts from.

    Duck-typed as gateway/reload/reloader.py's Reloader for ``watch`` (``path``, ``seen``,
    ``reload``). The check is start-up's and a reload's: parse, restart-only fields pinned,
    ``startup_check``. Nothing is logged here: every worker logs its own verdict."""

    def __init__(self, path: str, text: str, cfg: GatewayConfig, run_dir: str) -> None:
        self.path = path
        self.start_cfg = self.cfg = cfg
        self.seen: str | None = digest(text)
        self.file = os.path.join(run_dir, "in-force.yaml")
        self.start_file = os.path.join(run_dir, "start.yaml")
        _write(self.start_file, text)
        _write(self.file, text)

    def check(self) -> bool:
        try:
            text = read_config_text(self.path)
        except ConfigError:
            self.seen = None
            return False
        self.seen = digest(text)
        try:
            new = parse_config(text, source=self.path)
        except ConfigError:
            return False
        cfg = pin(self.start_cfg, new)[0]
        if startup_check(cfg).refusal or counted_per_worker(cfg) is not None:
            return False
        self.cfg = cfg
        _write(self.file, text)
        return True

    async def reload(self, trigger: str, *, quiet_if_same: bool = False) -> bool:
        return self.check()


def _write(path: str, text: str) -> None:
    # Whole or not at all: a worker starting meanwhile reads the old text or the new one.
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it may hold keys
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class Worker:
    def __init__(self, seat: WorkerSeat, sockets: Sequence[socket.socket] = ()) -> None:
        self.seat = seat
        self.sockets = list(sockets)  # the listening sockets its seat's descriptors are
        self.proc: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self.early_exits = 0


def supervise(cfg: GatewayConfig, config_path: str, argv0: Sequence[str] | None = None, *,
              text: str | None = None) -> int:  # fmt: skip
    """Runs the workers until a signal stops them; the process's exit status. ``text``: the
    file's text ``cfg`` was parsed from (None: read again)."""
    count = cfg.server.worker_count
    try:
        groups = bind_sockets(cfg.server.host, cfg.server.port, count)
    except ListenError as e:
        print(f"llm-gateway: {e}", file=sys.stderr)
        return 2
    run_dir = tempfile.mkdtemp(prefix="llm-gateway-workers-")
    os.chmod(run_dir, 0o700)  # the metrics sockets are for these workers only
    secret = None if cfg.loop_breaker.secret else secrets.token_hex(32)
    command = list(argv0) if argv0 is not None else [sys.executable, "-m", "gateway"]
    in_force = InForce(config_path, read_config_text(config_path) if text is None else text, cfg, run_dir)
    workers = [
        Worker(WorkerSeat(i, count, tuple(s.fileno() for s in group), run_dir, secret,
                          in_force.file, in_force.start_file), group)
        for i, group in enumerate(groups)
    ]  # fmt: skip
    scheme = "https" if cfg.server.tls_cert_file else "http"  # the workers speak TLS on these sockets
    listen = sorted({_url(s.getsockname(), scheme) for s in groups[0]})
    record_address(listen)  # the sockets are the supervisor's: so is the health check's address
    try:
        return asyncio.run(_run(workers, [*command, "--config", config_path], listen, in_force))
    except KeyboardInterrupt:
        return 0
    finally:
        forget_address()
        for group in groups:
            for s in group:
                s.close()
        shutil.rmtree(run_dir, ignore_errors=True)


async def _run(workers: list[Worker], command: list[str], listen: list[str], in_force: InForce) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _forwarder(workers, stop, sig))
    loop.add_signal_handler(signal.SIGHUP, _on_hangup, workers, in_force)
    file_watch = asyncio.create_task(watch(in_force, lambda: in_force.cfg.server.watch_config))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})  # held since __main__
    log.info({"event": "workers_started", "version": __version__, "workers": len(workers),
              "listen": listen, "pid": os.getpid(), "metrics_sockets": workers[0].seat.run_dir})  # fmt: skip
    failed = asyncio.Event()
    tasks = [asyncio.create_task(_keep(w, workers, command, stop, failed)) for w in workers]
    waiter = asyncio.create_task(failed.wait())
    await asyncio.wait([waiter, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    if failed.is_set() and not stop.is_set():
        _stop_all(workers, stop, signal.SIGTERM)
    await asyncio.gather(*tasks)
    waiter.cancel()
    file_watch.cancel()
    log.info({"event": "workers_stopped", "status": 1 if failed.is_set() else 0})
    return 1 if failed.is_set() else 0


def _forwarder(workers: list[Worker], stop: asyncio.Event, sig: signal.Signals) -> Callable[[], None]:
    def forward() -> None:
        _stop_all(workers, stop, sig)

    return forward


def _stop_all(workers: list[Worker], stop: asyncio.Event, sig: signal.Signals) -> None:
    """Every worker told to drain, and the supervisor's copies of their sockets closed: no
    worker is started after ``stop``, so the supervisor keeps nothing open for one. Each socket
    then lives as long as its worker listens on it. Held here until the worker's exit was
    noticed instead, a socket its worker had closed stayed in the port's SO_REUSEPORT group for
    nobody: connections the kernel gave it in that gap (about a third of them, with 3 workers)
    were reset when it closed (tests/e2e/test_workers.py, under load)."""
    stop.set()
    _signal_all(workers, sig)
    for w in workers:
        for s in w.sockets:
            s.close()


def _on_hangup(workers: list[Worker], in_force: InForce) -> None:
    _signal_all(workers, signal.SIGHUP)
    try:
        in_force.check()
    except Exception as e:  # the workers say what is wrong with the file; this must not stop
        log.error({"event": "supervisor_config_check_failed", "error": type(e).__name__})


def _signal_all(workers: list[Worker], sig: signal.Signals) -> None:
    for w in workers:
        if w.proc is not None and w.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                w.proc.send_signal(sig)


async def _keep(w: Worker, workers: list[Worker], command: list[str], stop: asyncio.Event,
                failed: asyncio.Event) -> None:  # fmt: skip
    """Runs one worker, restarting it when it exits on its own, until ``stop``."""
    try:
        await _run_worker(w, workers, command, stop, failed)
    finally:
        # Out of the SO_REUSEPORT group once no worker will accept on them again, not once
        # every worker has drained: the kernel spreads new connections over the sockets still
        # open, so the workers still draining answer them, where a socket held open for nobody
        # keeps its share waiting, then reset. Once the last one exits, nothing listens (as
        # for one process). (Already closed at a stop: ``_stop_all``; closing twice is a no-op.)
        for s in w.sockets:
            s.close()


async def _run_worker(w: Worker, workers: list[Worker], command: list[str], stop: asyncio.Event,
                      failed: asyncio.Event) -> None:  # fmt: skip
    while not stop.is_set():
        w.started_at = time.monotonic()
        # A process group of its own: a signal sent to the supervisor's group (Ctrl-C in a
        # terminal, kill -- -PGID) reaches the worker once, passed on by the supervisor, not
        # twice (a second one could find the default action once the worker's loop has closed).
        # SIGHUP blocked in the worker from its first instruction (the mask is inherited) until
        # its handler is in place: passed on meanwhile, it waits instead of ending the worker.
        # The fork happens before the first suspension, right after this task blocked it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            w.proc = await asyncio.create_subprocess_exec(
                *command, pass_fds=w.seat.fds, env={**os.environ, ENV: w.seat.to_env()}, process_group=0,
            )  # fmt: skip
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        if stop.is_set():  # the signal came while it was being started: it never got it
            with contextlib.suppress(ProcessLookupError):
                w.proc.send_signal(signal.SIGTERM)
        status = await w.proc.wait()
        if stop.is_set():
            return
        lived_s = time.monotonic() - w.started_at
        w.early_exits = w.early_exits + 1 if lived_s < EARLY_EXIT_S else 0
        looping = w.early_exits >= EARLY_EXITS_TO_GIVE_UP
        # A worker that cannot start never takes healthy ones down with it.
        restart = not looping or any(_serving(o) for o in workers if o is not w)
        delay = RESTART_DELAY_S
        if looping and restart:
            delay = min(RETRY_MAX_S, RESTART_DELAY_S * 2 ** (w.early_exits - EARLY_EXITS_TO_GIVE_UP + 1))
        log.error({"event": "worker_exited", "worker": w.seat.name, "pid": w.proc.pid, "status": status,
                   "lived_s": round(lived_s, 1), "restart": restart,
                   **({"retry_in_s": delay} if looping and restart else {})})  # fmt: skip
        if not restart:
            failed.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


def _serving(w: Worker) -> bool:
    """Running, and past the start-up a crash loop dies in."""
    running = w.proc is not None and w.proc.returncode is None
    return running and time.monotonic() - w.started_at >= EARLY_EXIT_S


def _url(sockaddr: tuple[object, ...], scheme: str) -> str:
    host, port = str(sockaddr[0]), sockaddr[1]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
