"""One reload: read the file, check it as start-up does, build the new Services, swap it in.

Either all of it applies or none does. A file that does not parse or validate, or that
start-up would refuse (gateway/auth.py ``startup_check``: an upstream's api_key served to
anyone who reaches a public port), leaves the running config in force and is one log line,
``config_reload_refused``, listing every problem, worded as start-up words them. A reload that
applies is one ``config_reloaded`` line: what changed (section and field names), the named
keys added and removed (names only), fields only a restart changes (restart_only.py), the
warnings start-up would print, and the summary the ``started`` line gives. Never a key value.

Reloads run one at a time; a SIGHUP during one is served after it, with the file as it is then.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from gateway.auth import startup_check
from gateway.config import (
    ConfigError,
    GatewayConfig,
    config_warnings,
    counted_per_worker,
    parse_config,
    read_config_text,
)
from gateway.live import Live
from gateway.reload.restart_only import pin


def digest(text: str) -> str:
    """What a reload has seen of the file: its content, not its timestamps."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


class Reloader:
    """``adapt``: what this process makes of the file's config (a worker's share, see
    gateway/workers/seat.py ``worker_config``); ``summarize``: the fields of the ``started``
    line; ``context``: fields every line carries (which worker)."""

    def __init__(
        self,
        path: str,
        live: Live,
        *,
        log: logging.Logger,
        adapt: Callable[[GatewayConfig], GatewayConfig] = lambda cfg: cfg,
        summarize: Callable[[GatewayConfig], Mapping[str, object]] = lambda cfg: {},
        env: Mapping[str, str] | None = None,
        context: Mapping[str, object] | None = None,
    ) -> None:
        self.path = path
        self.live = live
        self._log = log
        self._adapt = adapt
        self._summarize = summarize
        self._env = os.environ if env is None else env
        self._context = dict(context or {})
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[bool]] = set()
        # The digest of the text last read (None: none yet, or the file could not be read).
        self.seen: str | None = None

    def trigger(self, trigger: str) -> None:
        """Reload soon (from a signal handler, which cannot await)."""
        task = asyncio.get_running_loop().create_task(self.reload(trigger))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """At shutdown: a reload under way ends first (it may be starting a connection pool)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def reload(self, trigger: str, *, quiet_if_same: bool = False) -> bool:
        """Whether the file's config is now the one in force. ``quiet_if_same``: a config
        equal to the running one is not logged (the watcher's first look at the file)."""
        async with self._lock:
            try:
                return await self._reload(trigger, quiet_if_same)
            except Exception as e:  # a bug, not the file: refused and said, never a task dying unseen
                return self._refuse(trigger, (f"reloading failed: {type(e).__name__}",))

    async def _reload(self, trigger: str, quiet_if_same: bool) -> bool:
        try:
            text = read_config_text(self.path)
        except ConfigError as e:
            self.seen = None
            return self._refuse(trigger, e.problems)
        self.seen = digest(text)
        try:
            new = parse_config(text, self._env, source=self.path, reload=True)
        except ConfigError as e:
            return self._refuse(trigger, e.problems)
        running = self.live.services.cfg
        cfg, restart_needed = pin(running, new)
        cfg = self._adapt(cfg)
        verdict = startup_check(cfg)
        if verdict.refusal:
            return self._refuse(trigger, (verdict.refusal,))
        counted = counted_per_worker(cfg)
        if counted is not None:  # the file may say redis or one worker: only a restart makes it so
            return self._refuse(trigger, (f"{counted} (state and server.workers change only at a restart, "
                                          "so these limits wait for one)",))  # fmt: skip
        if cfg == running:
            self.live.services.telemetry.config_last_reload_successful.set(1)
            if not quiet_if_same:
                self._count("unchanged")
                self._log.info({"event": "config_reloaded", "trigger": trigger, "changed": [],
                                **self._context, **_restart(restart_needed)})  # fmt: skip
            return True
        try:
            await self.live.replace(cfg)
        except Exception as e:  # a bug, not the file: the type only, its text may quote the config
            return self._refuse(trigger, (f"building the new config failed: {type(e).__name__}",))
        self._count("applied")
        warnings = config_warnings(cfg) + ([verdict.warning] if verdict.warning else [])
        self._log.info({
            "event": "config_reloaded", "trigger": trigger, **self._context,
            "changed": changed(running, cfg), **_key_changes(running, cfg), **_restart(restart_needed),
            **({"warnings": warnings} if warnings else {}), **self._summarize(cfg),
        })  # fmt: skip
        return True

    def _count(self, result: str) -> None:
        # Metrics outlive reloads (the same registry): the Services now in force has them.
        telemetry = self.live.services.telemetry
        telemetry.config_reloads.labels(result).inc()
        telemetry.config_last_reload_successful.set(0 if result == "refused" else 1)

    def _refuse(self, trigger: str, problems: tuple[str, ...]) -> bool:
        self._count("refused")
        self._log.error({"event": "config_reload_refused", "trigger": trigger, **self._context,
                         "problems": list(problems), "in_force": "the running config"})  # fmt: skip
        return False


def changed(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    """The sections that differ, as ``section`` (lists, maps) or ``section.field``."""
    out: list[str] = []
    for name in type(old).model_fields:
        was, now = getattr(old, name), getattr(new, name)
        if was == now:
            continue
        if isinstance(was, BaseModel):
            out += [f"{name}.{f}" for f in type(was).model_fields if getattr(was, f) != getattr(now, f)]
        else:
            out.append(name)
    return out


def _key_changes(old: GatewayConfig, new: GatewayConfig) -> dict[str, Any]:
    """Named keys added, removed or changed, by name; the flat keys by count."""
    before, after = {k.name: k for k in old.keys}, {k.name: k for k in new.keys}
    keys = {
        "added": sorted(after.keys() - before.keys()),
        "removed": sorted(before.keys() - after.keys()),
        "changed": sorted(n for n in before.keys() & after.keys() if before[n] != after[n]),
    }
    out: dict[str, Any] = {"keys": {k: v for k, v in keys.items() if v}} if any(keys.values()) else {}
    was, now = set(old.server.client_keys), set(new.server.client_keys)
    if was != now:
        out["client_keys"] = {"added": len(now - was), "removed": len(was - now)}
    return out


def _restart(fields: list[str]) -> dict[str, object]:
    return {"restart_needed": fields} if fields else {}
