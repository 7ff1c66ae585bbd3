"""Runs the app on a socket and owns the process lifecycle.

SIGTERM (or SIGINT) starts draining: ``/readyz`` answers 503 at once so load balancers
stop sending, requests that still arrive are served, and in-flight requests and streams
get up to ``server.drain_s`` to finish; whatever is still in flight then gets the typed
``gateway_shutdown`` error (``drain``), and the process exits 0.

SIGHUP, and a change of the file with ``server.watch_config`` on, reload the config
(gateway/reload/); a draining process reloads nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web

from gateway import __version__, collector
from gateway.app import create_app, private_app
from gateway.config import GatewayConfig
from gateway.exact_routes import ExactFirstRunner
from gateway.listening import ListenError, cannot_listen, forget_address, record_address
from gateway.live import LIVE
from gateway.reload.reloader import Reloader
from gateway.reload.watch import watch
from gateway.services import Lifecycle
from gateway.state import StateStore
from gateway.tls import HandshakeBoundSite, ServerTLS
from gateway.tracing import summary as tracing_summary
from gateway.workers.metrics import snapshot_of
from gateway.workers.seat import WorkerSeat, worker_config

log = logging.getLogger("gateway.server")


async def serve(cfg: GatewayConfig, seat: WorkerSeat | None = None, config_path: str | None = None) -> None:
    """Serves until SIGTERM/SIGINT, then drains. ``seat``: this process is one of
    ``server.workers`` started by gateway/workers/supervisor.py, on the sockets it was given.
    ``config_path``: the file SIGHUP reloads (None: no reloads)."""
    app = create_app(cfg, peers=seat.peers() if seat is not None else (),
                     snapshot=snapshot_of(seat.socket_path(seat.index)) if seat is not None else None)
    live = app[LIVE]
    # Before listening, so that /readyz never answers ahead of the started line's facts.
    state = await _state_check(cfg, live.services.store)
    runner = make_runner(app, shutdown_timeout=1.0)
    await runner.setup()
    private = None
    cert = cfg.server.tls_cert_file
    server_tls = ServerTLS(cert, cfg.server.tls_key_file, log) if cert is not None else None
    if server_tls is not None:
        # Handshakes held to header_timeout_s (gateway/tls.py), on sockets bound here as a
        # supervisor binds its workers' (the port refused when taken).
        if seat is None:
            from gateway.workers.supervisor import bind_sockets

            try:
                socks = bind_sockets(cfg.server.host, cfg.server.port, 1)[0]
            except ListenError:
                await runner.cleanup()
                raise
        else:
            socks = [socket.socket(fileno=fd) for fd in seat.fds]
        sites: list[web.BaseSite] = [
            HandshakeBoundSite(runner, sock, ssl_context=server_tls.context,
                               handshake_s=cfg.server.header_timeout_s, backlog=1024)
            for sock in socks
        ]  # fmt: skip
    elif seat is None:
        sites = [web.TCPSite(runner, cfg.server.host, cfg.server.port, backlog=1024)]
    else:
        sites = [web.SockSite(runner, socket.socket(fileno=fd), backlog=1024) for fd in seat.fds]
    if seat is not None:
        # On TLS too: without it each scrape showed the one worker it reached.
        private = make_runner(private_app(app), shutdown_timeout=1.0)
        await private.setup()
        sites.append(web.UnixSite(private, seat.socket_path(seat.index)))
    try:
        for site in sites:
            await site.start()
    except OSError as e:
        await runner.cleanup()
        raise cannot_listen(cfg.server.host, cfg.server.port, e) from None
    collector.settle_after_start()
    addresses = _addresses(runner, "https" if server_tls is not None else "http")
    listen: dict[str, object] = {"listen": addresses}
    if seat is None:
        record_address(addresses)  # with workers, their supervisor's
    else:
        listen["worker"], listen["pid"] = seat.name, os.getpid()
    running = "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
    polls = {"busy_poll_us": cfg.server.busy_poll_us} if cfg.server.busy_poll_us else {}
    log.info({"event": "started", "version": __version__, **listen, **_summary(cfg), "event_loop": running,
              **polls, "state": state, **_open_files()})  # fmt: skip

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    orphan_watch = asyncio.create_task(_drain_if_orphaned(stop)) if seat is not None else None
    gc_pace = asyncio.create_task(collector.follow_in_flight(live.life))
    cert_watch = asyncio.create_task(server_tls.watch()) if server_tls is not None else None
    reloader = file_watch = None
    if config_path is not None:
        reloader = Reloader(
            config_path, live, log=log, summarize=_summary,
            adapt=(lambda c: worker_config(c, seat)) if seat is not None else (lambda c: c),
            context={"worker": seat.name, "pid": os.getpid()} if seat is not None else None,
        )  # fmt: skip
        loop.add_signal_handler(signal.SIGHUP, _on_hangup, reloader, server_tls)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})  # held since __main__ (one waiting: now)
        file_watch = asyncio.create_task(watch(reloader, lambda: live.services.cfg.server.watch_config))
    await stop.wait()
    if reloader is not None:
        if file_watch is not None:
            file_watch.cancel()
        # Ignored rather than left to its default action, which would end the process.
        loop.remove_signal_handler(signal.SIGHUP)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        await reloader.close()
    if orphan_watch is not None:
        orphan_watch.cancel()
        # A signal sent to the whole process group (Ctrl-C, kill -- -PGID) reaches a worker
        # twice: directly and passed on by its supervisor. Once draining, the second must not
        # find the default action (the loop restores it on closing) and end the process
        # before its last log lines are written.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)

    gc_pace.cancel()
    if cert_watch is not None:
        cert_watch.cancel()
    life = live.life
    life.start_draining()
    drain_s = live.services.cfg.server.drain_s  # as the last reload left it
    log.info({"event": "draining", "in_flight": life.in_flight, "drain_s": drain_s})
    await drain(life, drain_s, clock=live.services.monotonic)
    if life.settling:  # keys' spend still being written: a budget must not forget it
        await asyncio.wait(list(life.settling), timeout=2.0)
    accounts = live.services.accounts
    if accounts is not None:  # a settle that came after the last flush began
        with contextlib.suppress(Exception):
            await asyncio.wait_for(accounts.flush(final=True), timeout=2.0)
    await runner.cleanup()
    if private is not None:
        await private.cleanup()
    if seat is None:
        forget_address()
    log.info({"event": "stopped"})


def _on_hangup(reloader: Reloader, server_tls: ServerTLS | None) -> None:
    """SIGHUP: the config file, and the certificate (renewed into the same paths), read again."""
    reloader.trigger("SIGHUP")
    if server_tls is not None:
        server_tls.reload("SIGHUP")


# A drain waits for this long without a new request before it ends: arrivals mean a load
# balancer still sends here (it has yet to see /readyz's 503, or the endpoint's removal).
LULL_S = 1.0


async def drain(life: Lifecycle, drain_s: float, settle_s: float = 2.0, *, lull_s: float = LULL_S,
                clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
    """Until the requests in flight are done and none has come for ``lull_s`` (``life.arrived``,
    on ``clock``), for up to ``drain_s``; then every one still in flight is ended with the typed
    ``gateway_shutdown`` error (``Lifecycle.cut``): a stream with its API's error event, a
    request whose answer has not begun (waiting for the upstream, or in a retry's backoff) with
    a 503 in its API's envelope. Never a closed connection without an answer, which an SDK
    cannot tell from a network fault. Meanwhile every answer closes its connection (``stamp``),
    so keep-alive clients reconnect rather than send on a connection closed under them.
    ``settle_s`` bounds the wait for those answers to be written."""
    deadline = clock() + drain_s
    idle = asyncio.Event()
    life.idle.append(idle.set)
    while True:
        left = deadline - clock()
        if left <= 0:
            if life.in_flight == 0:
                return
            break
        if life.in_flight == 0:
            lull = life.arrived + lull_s - clock()
            if lull <= 0:
                return
            await asyncio.sleep(min(lull, left))
            continue
        idle.clear()
        try:
            await asyncio.wait_for(idle.wait(), timeout=left)
        except TimeoutError:
            break
    log.warning({"event": "drain_timeout", "in_flight": life.in_flight, "cutting": life.cut()})
    idle.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(idle.wait(), timeout=settle_s)


async def _drain_if_orphaned(stop: asyncio.Event, every_s: float = 1.0) -> None:
    """A worker whose supervisor died without passing a signal (SIGKILL, OOM) drains and exits
    rather than serving on alone with nobody to stop or restart it."""
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 (no event tells a process its parent died)
        await asyncio.sleep(every_s)
    log.warning({"event": "supervisor_gone", "pid": os.getpid()})
    stop.set()


async def _state_check(cfg: GatewayConfig, store: StateStore) -> dict[str, str]:
    """Which state backend serves, and whether it answered now. An unreachable Redis is a
    warning, not a refusal: every replica falls back to its own memory until Redis answers
    (and goes back to it by itself), so refusing would turn a Redis outage into a gateway
    outage at the next restart or rollout. A configuration that waiting will not heal (a
    wrong password, database or scheme) is not refused either, for the same reason (a Redis
    whose password was changed under running replicas would take every restarted one down),
    but said as an error, with what to fix."""
    if cfg.state.backend == "memory":
        return {"backend": "memory", "shared": "no (this process only)"}
    found = await store.check(cfg.state.timeout_ms / 1000)
    if found is None:
        return {"backend": "redis", "redis": "answered"}
    if found.answered:
        print(
            f"llm-gateway: WARNING: state.backend is redis and Redis answered at start-up, but it refuses "
            f"writes ({found.error}): {found.problem}. Until it takes them, what this replica would write "
            "there (keys' spend, circuits, the retry budget, the loop breaker's answers) is kept in its own "
            "memory only",
            file=sys.stderr, flush=True,
        )  # fmt: skip
        return {"backend": "redis", "redis": f"answered, refuses writes ({found.error}): {found.problem}"}
    if found.problem is not None:
        print(
            f"llm-gateway: ERROR: state.backend is redis but Redis cannot be used ({found.error}): "
            f"{found.problem}. This will not heal by waiting: fix it and restart. The gateway serves "
            "meanwhile (as when Redis is down), from this replica's own memory: nothing is shared (keys' "
            "limits and budgets hold per replica; circuits, retry budget and loop breaker too)",
            file=sys.stderr, flush=True,
        )  # fmt: skip
        said = f"cannot be used ({found.error}): {found.problem}; local state until fixed"
        return {"backend": "redis", "redis": said}
    print(
        f"llm-gateway: WARNING: state.backend is redis but Redis did not answer at start-up ({found.error} "
        f"within state.timeout_ms={cfg.state.timeout_ms}); serving from this replica's own memory "
        "(circuits, retry budget and loop breaker not shared) until it does",
        file=sys.stderr, flush=True,
    )  # fmt: skip
    return {"backend": "redis", "redis": f"did not answer ({found.error}); local state until it does"}


def make_runner(app: web.Application, **overrides: object) -> web.AppRunner:
    """How the gateway's app is served (tests serve it the same way)."""
    live = app.get(LIVE)
    options: dict[str, object] = {
        # A client that goes away cancels its handler, which closes the upstream request at
        # once instead of letting it run to the end unobserved.
        "handler_cancellation": True,
        "access_log": None,  # observe writes the one log line per request
        # Request bodies are decoded by the pipeline, which answers a bad or unsupported
        # Content-Encoding in the dialect's shape (see gateway/encodings.py).
        "auto_decompress": False,
        # A connection's time to send its request head, read from the running config as the
        # connection opens (gateway/idle_clients.py).
        "client_timeouts": None if live is None else (lambda: _client_timeouts(live.services.cfg)),
        **overrides,
    }
    return ExactFirstRunner(app, **options)  # type: ignore[arg-type]


def _open_files() -> dict[str, int]:
    """The most descriptors (client and upstream connections) this process may hold."""
    try:
        import resource
    except ImportError:  # Windows
        return {}
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return {} if soft == resource.RLIM_INFINITY else {"max_open_files": soft}


def _client_timeouts(cfg: GatewayConfig) -> tuple[float, float, float]:
    return cfg.server.header_timeout_s, cfg.server.keepalive_s, cfg.timeouts.idle_s


def _addresses(runner: web.AppRunner, scheme: str) -> list[str]:
    out = []
    for addr in runner.addresses:
        host, port = addr[0], addr[1]
        out.append(f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}")
    return out


def _summary(cfg: GatewayConfig) -> dict[str, object]:
    """What an operator needs to confirm the config; never a key (only whether one is set)."""
    return {
        "upstreams": [
            {"name": u.name, "base_url": _without_userinfo(u.base_url), "models": list(u.models),
             # What it speaks: requests in other APIs reach it translated. Unless configured,
             # said to be the host's known APIs ("host api.openai.com") or all three ("default").
             "apis": list(u.apis), **({"apis_from": u.apis_from} if u.apis_from != "config" else {}),
             **({"model_map": dict(u.model_map)} if u.model_map else {}),
             **({"fallbacks": list(u.fallbacks)} if u.fallbacks else {}),
             "api_key": f"set ({u.key_header})" if u.api_key else
                        "forwarded-from-client" if u.forwards_client_credentials else "none"}
            for u in cfg.upstreams
        ],
        **({"pools": [{"name": p.name, "models": list(p.models), "deployments": list(p.deployments),
                       "strategy": p.strategy, "affinity": p.affinity.enabled,
                       **({"fallbacks": list(p.fallbacks)} if p.fallbacks else {})} for p in cfg.pools]}
           if cfg.pools else {}),
        "client_auth": (f"required ({len(cfg.server.client_keys) + len(cfg.keys)} keys)"
                        if cfg.uses_client_keys else "off"),
        **({"named_keys": [k.name for k in cfg.keys]} if cfg.keys else {}),  # names only, never a key
        "compression": cfg.compression.enabled,
        # "off", or where spans go and the sampled share (never the exporter's headers).
        "tracing": tracing_summary(cfg.tracing, os.environ),
        "deadline_s": cfg.retry.deadline_s,
        "drain_s": cfg.server.drain_s,
    }  # fmt: skip


def _without_userinfo(url: str) -> str:
    # Config validation refuses credentials in URLs; this keeps the log safe regardless.
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
