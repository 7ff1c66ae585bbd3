"""The pieces of a reload (issue #35 item 7): what only a restart changes, what the log line
says, the one-at-a-time swap of Services and the closing of what a replaced one alone used, the
file watch. The whole of it against a running app is tests/integration/test_reload_app.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.app import create_app
from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.live import LIVE, Closable, Live
from gateway.reload.reloader import Reloader, changed, digest
from gateway.reload.restart_only import pin
from gateway.reload.watch import FileLook, watch
from gateway.services import Services

BASE = """\
server: {host: 0.0.0.0, port: 8080, client_keys: "flat-1"}
upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1', api_key: sk-up}]
keys: [{name: alice, key: gk-alice}, {name: bob, key: gk-bob}]
"""


def cfg(text: str = BASE) -> GatewayConfig:
    return parse_config(text, env={})


# --- restart_only.pin ---------------------------------------------------------------------


def test_what_only_a_restart_changes_keeps_its_running_value_and_is_named() -> None:
    running = cfg()
    new = cfg(BASE.replace("port: 8080", "port: 9090, drain_s: 5, workers: 2")
              + "state: {key_prefix: other}\nloop_breaker: {max_entries: 5, window_s: 3}\n")  # fmt: skip
    pinned, kept = pin(running, new)
    assert kept == ["server.port", "server.workers", "state.key_prefix", "loop_breaker.max_entries"]
    assert (pinned.server.port, pinned.server.worker_count, pinned.state.key_prefix) == (8080, 1, "llm-gateway:")
    assert pinned.loop_breaker.max_entries == running.loop_breaker.max_entries
    # Everything else is the new file's.
    assert pinned.server.drain_s == 5 and pinned.loop_breaker.window_s == 3
    # What GatewayConfig's validators set on each upstream survives the copy.
    assert not pinned.upstreams[0].forwards_client_credentials


def test_the_event_loop_is_chosen_at_start_so_a_reload_names_it_not_applies_it() -> None:
    """``server.event_loop`` picks the loop the process runs on before anything runs: a reload
    that changed it logged it under ``changed`` (as applied) while uvloop ran on."""
    new = cfg(BASE.replace("port: 8080", "port: 8080, event_loop: asyncio"))
    pinned, kept = pin(cfg(), new)
    assert kept == ["server.event_loop"] and pinned.server.event_loop == cfg().server.event_loop
    assert changed(cfg(), pinned) == []


def test_a_file_that_changes_nothing_only_a_restart_could_is_taken_as_it_is() -> None:
    new = cfg(BASE.replace("gk-bob", "gk-bob2"))
    pinned, kept = pin(cfg(), new)
    assert pinned is new and kept == []


def test_changed_names_fields_and_sections_never_values() -> None:
    new = cfg(BASE.replace("flat-1", "flat-2").replace("gk-bob", "gk-robert") + "timeouts: {idle_s: 5}\n")
    assert changed(cfg(), new) == ["server.client_keys", "timeouts.idle_s", "keys"]


# --- Live ---------------------------------------------------------------------------------


async def settle() -> None:
    for _ in range(10):  # closing runs in a task of its own
        await asyncio.sleep(0)


class Res:
    def __init__(self, name: str) -> None:
        self.name, self.closed = name, 0

    async def close(self) -> None:
        self.closed += 1


def svc_of(app_cfg: GatewayConfig) -> Services:
    return create_app(app_cfg, sender=object(), registry=CollectorRegistry())[LIVE].services  # type: ignore[arg-type]


async def test_a_replaced_services_is_retired_after_its_last_request_closing_only_what_it_alone_used() -> None:
    shared, first_only, second_only = Res("shared"), Res("first"), Res("second")
    built: list[tuple[Services, Sequence[Closable]]] = []

    async def build(c: GatewayConfig, previous: Services) -> tuple[Services, Sequence[Closable]]:
        built.append((svc_of(c), [shared, second_only]))
        return built[-1]

    first = svc_of(cfg())
    live = Live(first, [shared, first_only], build)
    first.serving = 2  # two requests still running on the first config
    second = await live.replace(cfg(BASE.replace("gk-bob", "gk-carol")))
    assert live.services is second and second.life is first.life
    assert live.generations == 2 and first_only.closed == 0
    first.serving = 0
    assert first.retired is not None
    first.retired()  # what observe does when the last of them ends
    await settle()
    assert live.generations == 1
    assert (first_only.closed, shared.closed, second_only.closed) == (1, 0, 0)
    await live.close()
    assert (first_only.closed, shared.closed, second_only.closed) == (1, 1, 1)


async def test_a_services_with_nothing_running_is_retired_at_once() -> None:
    old_only = Res("old")

    async def build(c: GatewayConfig, previous: Services) -> tuple[Services, Sequence[Closable]]:
        return svc_of(c), []

    live = Live(svc_of(cfg()), [old_only], build)
    await live.replace(cfg())
    await settle()
    assert live.generations == 1 and old_only.closed == 1


async def test_create_app_keeps_what_the_new_config_would_build_the_same() -> None:
    app = create_app(cfg(), registry=CollectorRegistry())
    live = app[LIVE]
    first = live.services
    await live.replace(cfg(BASE.replace("gk-bob", "gk-carol")))
    second = live.services
    assert second.sender is first.sender and second.budget is first.budget and second.loop is first.loop
    assert second.store is first.store and second.telemetry is first.telemetry
    assert second.auth is not first.auth and second.accounts is not first.accounts
    await live.replace(cfg(BASE.replace("gk-bob", "gk-carol") + "timeouts: {connect_s: 3}\n"))
    assert live.services.sender is not second.sender  # a sender is built from the timeouts
    await live.close()


async def test_a_reload_that_changes_a_pool_keeps_its_conversations_where_their_cache_is() -> None:
    """Adding a key to a pool (or changing its affinity bounds) forgot every conversation's
    deployment: half of them moved at the next turn, no break counted (measured)."""
    members = "".join(f"  - {{name: {n}, base_url: 'http://127.0.0.1:9/v1', api_key: k{n}}}\n" for n in "abc")
    pooled = "upstreams:\n" + members + "pools: [{name: p, models: ['gpt-*'], deployments: [a, b]}]\n"
    live = create_app(cfg(pooled), registry=CollectorRegistry())[LIVE]
    table = live.services.pools["p"].affinity
    assert table is not None
    table.bind("conversation-1", "b")
    await live.replace(cfg(pooled.replace("deployments: [a, b]", "deployments: [a, b, c]")))
    kept = live.services.pools["p"].affinity
    assert kept is table and kept.get("conversation-1") == "b"
    await live.replace(cfg(pooled.replace("deployments: [a, b]", "deployments: [a, b, c], "
                                          "affinity: {max_entries: 5}")))  # fmt: skip
    resized = live.services.pools["p"].affinity
    assert resized is not None and resized is not table and resized.get("conversation-1") == "b"
    await live.replace(cfg(pooled.replace("deployments: [a, b]", "deployments: [a, b], affinity: {enabled: false}")))
    assert live.services.pools["p"].affinity is None
    await live.close()


# --- Reloader -----------------------------------------------------------------------------


class Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(dict(record.msg))  # type: ignore[call-overload]


@pytest.fixture
def logged() -> Any:
    log = logging.getLogger("tests.reload")
    handler = Logged()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield log, handler.lines
    log.removeHandler(handler)


async def reloader_for(tmp_path: Path, log: logging.Logger) -> tuple[Reloader, Path, Live]:
    path = tmp_path / "gateway.yaml"
    path.write_text(BASE)
    live = create_app(cfg(), sender=object(), registry=CollectorRegistry())[LIVE]  # type: ignore[arg-type]
    return Reloader(str(path), live, log=log, env={}, summarize=lambda c: {"upstreams": len(c.upstreams)}), path, live


async def test_a_reload_applies_the_whole_file_and_says_what_changed_by_name(tmp_path: Path, logged: Any) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    path.write_text(BASE.replace("{name: bob, key: gk-bob}", "{name: carol, key: gk-carol}")
                    .replace("port: 8080", "port: 9999").replace("flat-1", "flat-1,flat-2"))  # fmt: skip
    assert await reloader.reload("SIGHUP")
    assert {k.name for k in live.services.cfg.keys} == {"alice", "carol"}
    assert live.services.cfg.server.port == 8080
    [line] = lines
    assert line["event"] == "config_reloaded" and line["trigger"] == "SIGHUP"
    assert line["keys"] == {"added": ["carol"], "removed": ["bob"]}
    assert line["client_keys"] == {"added": 1, "removed": 0}
    assert line["restart_needed"] == ["server.port"] and line["upstreams"] == 1
    assert "server.client_keys" in line["changed"] and "keys" in line["changed"]
    assert "gk-" not in json.dumps(line) and "flat-" not in json.dumps(line)
    assert reloader.seen == digest(path.read_text())


async def test_an_invalid_file_changes_nothing_and_one_line_lists_every_problem(tmp_path: Path, logged: Any) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    before = live.services
    path.write_text(BASE.replace("port: 8080", "port: http") + "timeouts: {idle_s: -1}\nretyr: {}\n")
    assert not await reloader.reload("SIGHUP")
    assert live.services is before
    [line] = lines
    assert line["event"] == "config_reload_refused"
    problems = line["problems"]
    assert len(problems) == 3, problems
    assert any(p.startswith("server.port") for p in problems)
    assert any(p.startswith("timeouts.idle_s") for p in problems)
    assert any(p.startswith("retyr: unknown key") for p in problems)


async def test_an_impossible_date_is_refused_as_any_invalid_file(tmp_path: Path, logged: Any) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    before = live.services
    path.write_text(BASE + "expires: 2026-13-01\n")
    assert not await reloader.reload("SIGHUP")
    assert live.services is before
    [line] = lines
    assert line["event"] == "config_reload_refused" and "2026-13-01 is not a date" in line["problems"][0]


async def test_a_reload_that_fails_unexpectedly_is_refused_not_raised(
    tmp_path: Path, logged: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)

    def broken(*a: object, **k: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("gateway.reload.reloader.parse_config", broken)
    assert not await reloader.reload("SIGHUP")
    [line] = lines
    assert line["event"] == "config_reload_refused" and line["problems"] == ["reloading failed: RuntimeError"]


async def test_the_watch_survives_a_reload_that_raises(tmp_path: Path, logged: Any) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    calls: list[str] = []

    async def raising(trigger: str, *, quiet_if_same: bool = False) -> bool:
        calls.append(trigger)
        raise RuntimeError("a bug")

    reloader.reload = raising  # type: ignore[method-assign]
    ticks: list[float] = []

    async def sleep(s: float) -> None:
        ticks.append(s)
        if len(ticks) > 4:
            raise asyncio.CancelledError
        path.write_text(BASE + f"# {len(ticks)}\n")

    with pytest.raises(asyncio.CancelledError):
        await watch(reloader, lambda: True, sleep=sleep)
    assert len(calls) >= 2  # still looking after the first one raised


async def test_a_key_given_twice_is_refused_on_reload_as_at_start_up(tmp_path: Path, logged: Any) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    before = live.services
    # The second `keys` would have dropped alice without a word.
    path.write_text(BASE + "keys: [{name: bob, key: gk-bob}]\n")
    assert not await reloader.reload("SIGHUP")
    assert live.services is before
    [line] = lines
    assert line["event"] == "config_reload_refused"
    assert line["problems"] == ["keys: given twice (lines 3 and 4); YAML keeps only the last, so remove or merge one"]


async def test_a_variable_a_reload_cannot_read_says_what_to_do_and_a_digest_rotates_the_key(
    tmp_path: Path, logged: Any
) -> None:
    """keys.md's rotation was a new ${VAR} beside the old one, and a reload: refused, "set it in
    the gateway's environment", which a running process never reads again (audit)."""
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    reloader = Reloader(str(path), live, log=log, env={"ALICE_KEY_OLD": "gk-alice"})
    rotated = BASE.replace("key: gk-alice", 'key: ["${ALICE_KEY_OLD}", "${ALICE_KEY_NEW}"]')
    path.write_text(rotated.replace("api_key: sk-up", "api_key: '${UP_KEY}'")
                    .replace("'http://127.0.0.1:9/v1'", "'${UP_URL}'"))  # fmt: skip
    assert not await reloader.reload("SIGHUP")
    started = "a reload reads the environment the process started with"
    assert lines[-1]["event"] == "config_reload_refused"
    assert lines[-1]["problems"] == [
        f"upstreams[0].base_url: environment variable UP_URL is not set ({started}: put the value in the "
        "file (or a default), or restart with it set)",
        f"upstreams[0].api_key: environment variable UP_KEY is not set ({started}: put the value in the "
        "file, or restart with it set)",
        f"keys[0].key[1]: environment variable ALICE_KEY_NEW is not set ({started}: put the key's "
        "key_sha256 (or the key) in the file, or restart)",
    ]
    assert "gk-alice" not in json.dumps(lines[-1])
    # What it says works: both digests, the old key's and the new one's (keys.md's one-liner).
    old, new = (hashlib.sha256(k.encode()).hexdigest() for k in ("gk-alice", "gk-alice-2"))
    path.write_text(BASE.replace("key: gk-alice", f"key_sha256: [{old}, {new}]"))
    assert await reloader.reload("SIGHUP")
    assert live.services.cfg.keys[0].key_sha256 == (old, new)
    # Start-up's words are its own: a restart is what sets a variable there.
    with pytest.raises(ConfigError) as refused:
        parse_config(rotated, env={"ALICE_KEY_OLD": "gk-alice"})
    assert refused.value.problems == (
        "keys[0].key[1]: environment variable ALICE_KEY_NEW is not set (it holds a secret, which has no "
        "default: set it in the gateway's environment)",
    )


async def test_what_start_up_would_refuse_a_reload_refuses(tmp_path: Path, logged: Any) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    # No client keys left, on 0.0.0.0, with an upstream api_key: anyone reaching the port would spend it.
    path.write_text(BASE.replace(', client_keys: "flat-1"', "").replace("keys: [", "#"))
    assert not await reloader.reload("file")
    assert live.services.cfg.keys and lines[-1]["event"] == "config_reload_refused"
    assert "refusing to listen on 0.0.0.0:8080 without client keys" in lines[-1]["problems"][0]


async def test_a_missing_file_is_refused_and_the_same_config_is_quiet_on_a_first_look(
    tmp_path: Path, logged: Any
) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    assert await reloader.reload("file", quiet_if_same=True)
    assert lines == [] and reloader.seen == digest(BASE)
    assert await reloader.reload("SIGHUP")
    assert lines[-1]["event"] == "config_reloaded" and lines[-1]["changed"] == []
    path.unlink()
    assert not await reloader.reload("SIGHUP")
    assert lines[-1]["problems"] == [f"config file not found: {path}"] and reloader.seen is None


# --- the file watch -----------------------------------------------------------------------


def test_the_digest_follows_the_content_not_the_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(BASE)
    look = FileLook(str(path))
    first = look.digest()
    assert first == digest(BASE)
    os.utime(path, ns=(1, 1))  # touched: read again, same content
    assert look.digest() == first
    path.write_text(BASE + "\n# a comment\n")
    assert look.digest() == digest(BASE + "\n# a comment\n")
    path.unlink()
    assert look.digest() is None


async def test_the_watch_reloads_on_a_change_of_content_only_while_enabled(tmp_path: Path, logged: Any) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    ticks: list[float] = []
    steps = [
        lambda: None,  # first look: the file the process started from, said nothing
        lambda: path.write_text(BASE.replace("gk-bob", "gk-bob2")),
        lambda: os.utime(path, ns=(5, 5)),
        lambda: switch.append(False),
        lambda: path.write_text(BASE),
    ]
    switch = [True]

    async def sleep(s: float) -> None:
        ticks.append(s)
        if len(ticks) > len(steps):
            raise asyncio.CancelledError
        steps[len(ticks) - 1]()

    with pytest.raises(asyncio.CancelledError):
        await watch(reloader, lambda: switch[-1], sleep=sleep)
    assert ticks[0] == 1.0
    assert [d["event"] for d in lines] == ["config_reloaded"]  # the edit, not the touch, nor while off
    assert lines[0]["trigger"] == "file" and lines[0]["keys"] == {"changed": ["bob"]}


async def test_the_watch_loads_a_change_only_once_it_has_stayed_for_a_look(tmp_path: Path, logged: Any) -> None:
    """An editor writing in place, caught halfway: the half before ``keys:`` parsed and was
    served for a moment, every key gone (on loopback, a warning only)."""
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    half = BASE[: BASE.index("\nkeys:") + 1]
    steps = [
        lambda: None,  # first look
        lambda: path.write_text(half),  # the first write of two
        lambda: path.write_text(BASE.replace("gk-bob", "gk-bob2")),  # the whole file, a look later
        lambda: None,  # the same for a look: loaded
    ]
    ticks: list[float] = []

    async def sleep(s: float) -> None:
        ticks.append(s)
        if len(ticks) > len(steps):
            raise asyncio.CancelledError
        steps[len(ticks) - 1]()

    with pytest.raises(asyncio.CancelledError):
        await watch(reloader, lambda: True, sleep=sleep)
    assert [d["event"] for d in lines] == ["config_reloaded"]
    assert lines[0]["keys"] == {"changed": ["bob"]}  # never the half: no key was removed


async def test_a_glob_fnmatch_would_read_otherwise_is_refused_on_reload_as_at_start_up(
    tmp_path: Path, logged: Any
) -> None:
    log, lines = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    before = live.services
    path.write_text(BASE.replace("{name: alice, key: gk-alice}", "{name: alice, key: gk-alice, models: 'gpt-[4'}"))
    assert not await reloader.reload("SIGHUP")
    assert live.services is before
    [line] = lines
    assert line["event"] == "config_reload_refused"
    assert line["problems"][0].startswith("keys[0].models: 'gpt-[4': no ']' closes the '['")


async def test_limits_that_each_worker_would_count_alone_are_refused_whatever_the_file_says_of_state(
    tmp_path: Path, logged: Any
) -> None:
    """Two workers on memory, and a file adding a limit that also says `state: redis` (or one
    worker): the check passed the file as written, the running state and workers were put back,
    and each worker held the limit on its own, twice over (audit: 10 of 20 requests served
    under a limit of 5)."""
    log, lines = logged
    running = BASE.replace("port: 8080,", "port: 8080, workers: 2,")
    path = tmp_path / "gateway.yaml"
    path.write_text(running)
    live = create_app(cfg(running), sender=object(), registry=CollectorRegistry())[LIVE]  # type: ignore[arg-type]
    reloader = Reloader(str(path), live, log=log, env={}, summarize=lambda c: {})
    limited = running.replace("{name: alice, key: gk-alice}", "{name: alice, key: gk-alice, requests_per_minute: 5}")
    for text in (limited + "state: {backend: redis, url: 'redis://127.0.0.1:6379/0'}\n",
                 limited.replace("workers: 2,", "workers: 1,")):
        path.write_text(text)
        assert not await reloader.reload("SIGHUP")
        assert live.services.cfg.keys[0].requests_per_minute is None
        assert lines[-1]["event"] == "config_reload_refused"
        assert "would hold 2 times over" in lines[-1]["problems"][0]
        assert "only at a restart" in lines[-1]["problems"][0]


async def test_the_last_reload_gauge_says_whether_the_file_is_in_force_until_a_reload_succeeds(
        tmp_path: Path, logged: Any) -> None:  # fmt: skip
    # A count of refusals told an alert one happened, and its window ran out while the revoked
    # key the edit meant to remove was still served: the gauge stays 0 until the file is in force.
    log, _ = logged
    reloader, path, live = await reloader_for(tmp_path, log)
    gauge = live.services.telemetry.config_last_reload_successful
    assert gauge._value.get() == 1
    path.write_text(BASE.replace("port: 8080", "port: http"))
    assert not await reloader.reload("SIGHUP")
    assert gauge._value.get() == 0
    assert not await reloader.reload("SIGHUP")
    assert gauge._value.get() == 0
    path.write_text(BASE)  # put back as it runs: nothing to apply, and the file is in force again
    assert await reloader.reload("watch", quiet_if_same=True)
    assert gauge._value.get() == 1
    path.write_text(BASE.replace("{name: bob, key: gk-bob}", "{name: carol, key: gk-carol}"))
    assert await reloader.reload("SIGHUP")
    assert live.services.telemetry.config_last_reload_successful._value.get() == 1
