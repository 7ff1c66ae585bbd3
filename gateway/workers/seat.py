"""What a worker process is told by its supervisor, and how its config differs from the file's.

The supervisor starts each worker as ``llm-gateway --config PATH`` again (a fresh interpreter,
no fork of a process that has threads), with one environment variable, ``LLM_GATEWAY_WORKER``,
holding this seat as JSON: which worker it is, the listening sockets it inherits, the directory
of the workers' private sockets (metrics are gathered through them) and, when the config sets
no ``loop_breaker.secret``, one drawn by the supervisor so that every worker computes the same
fingerprints, and the files holding the config text the workers run (below).

A worker restarted after a crash starts from ``in_force``, the text the supervisor last saw
load (a SIGHUP or a watched change the supervisor checked as the workers do), not from the
file at ``--config``: a file refused by the running workers "changes nothing", a restart
included. Restart-only fields keep their value from ``start``, the text the supervisor started
with, as they do in its siblings (gateway/reload/restart_only.py). Later reloads read the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.config import GatewayConfig

ENV = "LLM_GATEWAY_WORKER"


@dataclass(frozen=True)
class WorkerSeat:
    index: int  # 0-based
    count: int
    fds: tuple[int, ...]  # listening sockets, bound by the supervisor
    run_dir: str  # w<index>.sock for each worker
    secret: str | None = None
    in_force: str | None = None  # a file: the config text the workers run
    start: str | None = None  # a file: the config text the supervisor started with

    @property
    def name(self) -> str:
        return f"{self.index + 1}/{self.count}"

    def socket_path(self, index: int) -> str:
        return os.path.join(self.run_dir, f"w{index}.sock")

    def peers(self) -> list[str]:
        """The private sockets of the other workers."""
        return [self.socket_path(i) for i in range(self.count) if i != self.index]

    def to_env(self) -> str:
        return json.dumps({"index": self.index, "count": self.count, "fds": list(self.fds),
                           "run_dir": self.run_dir, "secret": self.secret, "in_force": self.in_force,
                           "start": self.start})  # fmt: skip

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerSeat | None:
        raw = env.get(ENV)
        if not raw:
            return None
        d = json.loads(raw)
        return cls(int(d["index"]), int(d["count"]), tuple(int(f) for f in d["fds"]), str(d["run_dir"]),
                   d.get("secret"), d.get("in_force"), d.get("start"))  # fmt: skip


def worker_config(cfg: GatewayConfig, seat: WorkerSeat) -> GatewayConfig:
    """The config one worker runs: the file's, with what must change when N processes serve it.

    - ``loop_breaker.secret``: the supervisor's when the file sets none, so that a repeat has the
      same fingerprint whichever worker (or, on Redis, replica sharing the secret) sees it.
    - ``retry.budget.min_retries_per_s`` on local state: each worker keeps its own budget, so
      each gets 1/N of the floor and the machine as a whole keeps the configured bound (the
      percentage is a ratio and holds per worker as it does in total).
    """
    updates: dict[str, object] = {}
    lb = cfg.loop_breaker
    if lb.secret is None and seat.secret is not None:
        drawn = lb.model_copy(update={"secret": seat.secret})
        drawn._secret_drawn = True  # (not another replica's: conversations are named without it)
        updates["loop_breaker"] = drawn
    if cfg.state.backend == "memory" and seat.count > 1:
        budget = cfg.retry.budget
        share = budget.model_copy(update={"min_retries_per_s": budget.min_retries_per_s / seat.count})
        updates["retry"] = cfg.retry.model_copy(update={"budget": share})
    return cfg.model_copy(update=updates) if updates else cfg
