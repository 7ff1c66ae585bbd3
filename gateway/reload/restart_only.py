"""What a reload cannot change in a running process, so the running value is kept.

The listening sockets (``server.host``, ``port``, ``workers``) are bound once, by this process
or its supervisor; the state store (``state:``, and the loop breaker's memory caps, which size
the in-memory store) holds spend, limits and circuits, which a new store would forget; the
HTTP client (``server.upstream_client``), the event loop the process runs on
(``server.event_loop``), whether and from where the listening sockets speak
TLS (the certificate at those paths is re-read in place: gateway/tls.py), and the log set-up
(``server.log_level``) are chosen before anything runs. A reload that changes them still
applies everything else, and its log line names these fields under ``restart_needed`` (never
their values: ``state.url`` may carry a password).
"""

from __future__ import annotations

from pydantic import BaseModel

from gateway.config import GatewayConfig

# section -> its fields that only a restart changes; None: the whole section.
RESTART_ONLY: dict[str, tuple[str, ...] | None] = {
    "server": ("host", "port", "workers", "upstream_client", "event_loop", "log_level", "tls_cert_file",
               "tls_key_file"),
    "state": None,
    "loop_breaker": ("max_entries", "max_total_bytes"),
}


def pin(running: GatewayConfig, new: GatewayConfig) -> tuple[GatewayConfig, list[str]]:
    """``new`` with the running values of what only a restart changes, and the fields (as
    ``section.field``) whose new value is not applied."""
    updates: dict[str, BaseModel] = {}
    kept: list[str] = []
    for section, fields in RESTART_ONLY.items():
        was, now = getattr(running, section), getattr(new, section)
        names = type(was).model_fields if fields is None else fields
        differ = [f for f in names if getattr(was, f) != getattr(now, f)]
        if differ:
            kept += [f"{section}.{f}" for f in differ]
            updates[section] = now.model_copy(update={f: getattr(was, f) for f in differ})
    # A shallow copy: the upstreams keep what GatewayConfig's validators set on them.
    return (new.model_copy(update=updates) if updates else new), kept
