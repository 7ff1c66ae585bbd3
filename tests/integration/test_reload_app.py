"""Reloading the config under traffic (issue #35 item 7), the app in-process: a stream in flight
finishes on the upstream it started on while new requests go to the new one, a removed key is
refused from the next request, an invalid file changes nothing and says why in one line."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.live import LIVE
from gateway.reload.reloader import Reloader
from tests.fakeupstream import FakeUpstream, Stream, chunk, data_events
from tests.integration.conftest import Gateway, MakeGateway, eventually

# The reloaded files say first_byte_s and idle_s 1 s: the harness's gateway starts with the same.
pytestmark = pytest.mark.stall_timeouts

ALICE, BOB, CAROL = ({"Authorization": f"Bearer gk-{n}"} for n in ("alice", "bob", "carol"))


def upstream(url: str) -> str:
    return f"  - {{name: primary, base_url: '{url}'}}\n"


# $1 per prompt token, $2 per completion token: spend is plain to read.
PRICES = "prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}}\n"


def keys(*names: str) -> str:
    return PRICES + "keys:\n" + "".join(f"  - {{name: {n}, key: gk-{n}, budget: {{usd: 1000000}}}}\n" for n in names)


def file_text(url: str, *names: str, timeouts: str = "timeouts: {connect_s: 2, first_byte_s: 1.0, idle_s: 1.0}\n",
              ) -> str:  # fmt: skip
    """What make_gateway runs, as a file."""
    return "upstreams:\n" + upstream(url) + timeouts + keys(*names) + "loop_breaker: {enabled: false}\n"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(dict(record.msg))  # type: ignore[call-overload]


@pytest.fixture
def lines() -> Iterator[list[dict[str, Any]]]:
    log = logging.getLogger("tests.integration.reload")
    handler = Lines()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield handler.lines
    log.removeHandler(handler)


async def spent(gw: Gateway, headers: dict[str, str]) -> float:
    """The key's spend this month once its requests are settled (settling follows the answer)."""
    for _ in range(100):
        async with gw.session.get(gw.base + "/v1/gateway/key", headers=headers) as r:
            budget = (await r.json())["budget"]
        if budget["reserved_usd"] == 0:
            return float(budget["spent_usd"])
        await asyncio.sleep(0.02)
    raise AssertionError("never settled")


async def start(make_gateway: MakeGateway, tmp_path: Path, old: FakeUpstream) -> tuple[Gateway, Reloader, Path]:
    gw = await make_gateway(keys("alice", "bob"), fake=old, upstreams=upstream(old.url), real_sleep=True)
    path = tmp_path / "gateway.yaml"
    path.write_text(file_text(old.url, "alice", "bob"))
    reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.integration.reload"), env={})
    assert await reloader.reload("SIGHUP", quiet_if_same=True)  # the file is what runs
    return gw, reloader, path


SLOW = Stream([chunk({"content": f"w{i} "}) for i in range(30)] + [chunk({}, "stop")], delay_s=0.03)
STREAM = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "long"}]}


async def test_a_stream_in_flight_finishes_on_its_upstream_while_new_requests_get_the_new_config(
    make_gateway: MakeGateway, tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    async with FakeUpstream() as old, FakeUpstream() as new:
        gw, reloader, path = await start(make_gateway, tmp_path, old)
        assert (await gw.chat(headers=ALICE))[0] == 200
        spent_before = await spent(gw, ALICE)
        assert spent_before > 0
        old.script(SLOW)
        live = gw.app[LIVE]
        first = live.services
        streaming = asyncio.create_task(gw.chat(STREAM, headers=BOB))
        for _ in range(300):  # until the stream has reached the old upstream (polled: no event tells)
            if len(old.chat_requests()) == 2:
                break
            await asyncio.sleep(0.01)
        assert first.serving == 1
        # A new upstream, a removed key and an added one, and new timeouts (so a new sender).
        path.write_text(file_text(new.url, "alice", "carol",
                                  timeouts="timeouts: {connect_s: 3, first_byte_s: 1.0, idle_s: 1.0}\n"))
        assert await reloader.reload("SIGHUP")
        assert live.services is not first and live.generations == 2
        assert not streaming.done()

        assert (await gw.chat(headers=ALICE))[0] == 200
        assert len(new.chat_requests()) == 1
        status, _, body = await gw.chat(headers=BOB)
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_client_key"
        assert (await gw.chat(headers=CAROL))[0] == 200
        # Spend went on by key name: the new config's alice is the same account.
        assert await spent(gw, ALICE) == 2 * spent_before

        status, _, body = await streaming
        assert status == 200
        events = data_events(body)
        assert events[-1] == "[DONE]"
        words = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
        assert words == "".join(f"w{i} " for i in range(30))  # all of it, from the old upstream
        assert len(old.chat_requests()) == 2 and len(new.chat_requests()) == 2
        # The first config's sender closed after its last request.
        await eventually(lambda: live.generations == 1, "the first config retired")
    [line] = lines
    assert line["event"] == "config_reloaded" and line["keys"] == {"added": ["carol"], "removed": ["bob"]}
    assert "upstreams" in line["changed"] and "timeouts.connect_s" in line["changed"]
    # Metrics went on: the upstream's series is the same one across both configs.
    assert gw.metric("llm_gateway_requests_total", upstream="primary", model="gpt-4o-mini", status="200",
                     error_type="none") == 4  # fmt: skip


async def test_a_removed_keys_series_stay_gone_after_its_requests_in_flight_end(
    make_gateway: MakeGateway, tmp_path: Path,
) -> None:
    """docs/keys.md: "a reload that removes a key drops its series". Two streams of bob's in
    flight at the reload that removed him brought his spend and token series back as they
    ended, for good (audit of keys and spend). They are answered and settled, uncounted."""
    async with FakeUpstream() as old:
        gw, reloader, path = await start(make_gateway, tmp_path, old)
        assert (await gw.chat(headers=BOB))[0] == 200
        assert await spent(gw, BOB) > 0
        old.script(SLOW, SLOW)
        streams = [asyncio.create_task(gw.chat(STREAM, headers=BOB)) for _ in range(2)]
        await eventually(lambda: len(old.chat_requests()) == 3, "both streams reached the upstream")
        path.write_text(file_text(old.url, "alice"))
        assert await reloader.reload("SIGHUP")
        assert 'key="bob"' not in await _metrics_text(gw)
        assert [(await s)[0] for s in streams] == [200, 200]
        # Retired after its last request's settle (observe.py): bob's streams are counted by now.
        await eventually(lambda: gw.app[LIVE].generations == 1, "the first config retired")
        assert 'key="bob"' not in await _metrics_text(gw)


async def _metrics_text(gw: Gateway) -> str:
    async with gw.session.get(gw.base + "/metrics") as r:
        return (await r.read()).decode()


async def test_an_invalid_file_keeps_the_running_config_and_logs_every_problem_once(
    make_gateway: MakeGateway, tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    async with FakeUpstream() as old:
        gw, reloader, path = await start(make_gateway, tmp_path, old)
        before = gw.app[LIVE].services
        broken = file_text("ftp://nowhere", "alice") + "retry: {deadline_s: 0}\nserver: {prot: 1}\n"
        path.write_text(broken)
        assert not await reloader.reload("SIGHUP")
        assert gw.app[LIVE].services is before
        assert (await gw.chat(headers=BOB))[0] == 200  # bob is still a key: nothing applied
        assert len(old.chat_requests()) == 1
    [line] = lines
    assert line["event"] == "config_reload_refused" and line["trigger"] == "SIGHUP"
    problems = line["problems"]
    assert len(problems) == 3, problems
    assert problems[0].startswith("server.prot: unknown key")
    assert any(p.startswith("upstreams[0].base_url") for p in problems)
    assert any(p.startswith("retry.deadline_s") for p in problems)


async def test_each_reload_is_counted_by_its_result(make_gateway: MakeGateway, tmp_path: Path) -> None:
    """Operators alert on a refused reload (a file edited into an invalid state would otherwise
    be noticed only at the next restart, which then fails)."""
    async with FakeUpstream() as old:
        gw, reloader, path = await start(make_gateway, tmp_path, old)
        assert gw.metric("llm_gateway_config_reloads_total", result="unchanged") == 0  # the quiet first look
        assert await reloader.reload("SIGHUP")
        path.write_text(file_text(old.url, "alice"))
        assert await reloader.reload("SIGHUP")
        path.write_text("upstreams: []\nserver: {prot: 1}\n")
        assert not await reloader.reload("SIGHUP")
        assert gw.metric("llm_gateway_config_reloads_total", result="unchanged") == 1
        assert gw.metric("llm_gateway_config_reloads_total", result="applied") == 1
        assert gw.metric("llm_gateway_config_reloads_total", result="refused") == 1


async def test_a_failure_remembered_before_a_reload_that_fixes_the_upstream_is_not_answered_after_it(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    """The loop breaker answered the identical request from memory after the operator had
    replaced the refused upstream key (measured: the old refusal, x-llm-attempts: 0, for the
    remembered window). A failure is the answer of one set of upstreams; a new one asks again."""
    async with FakeUpstream() as fake:
        fake.require_key = True
        fake.keys.revoke("sk-old")
        remembered = "loop_breaker: {enabled: true, secret: shared}\n"
        gw = await make_gateway(remembered, fake=fake,
                                upstreams=f"  - {{name: primary, base_url: '{fake.url}', api_key: sk-old}}\n")  # fmt: skip
        path = tmp_path / "gateway.yaml"
        text = "upstreams:\n  - {name: primary, base_url: '" + fake.url + "', api_key: KEY}\n" + remembered
        path.write_text(text.replace("KEY", "sk-old"))
        reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.integration.reload"), env={})
        assert await reloader.reload("SIGHUP", quiet_if_same=True)
        asked = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "the same"}]}
        # The provider refused the gateway's own key: 502 upstream_auth (the client's is fine).
        assert (await gw.chat(asked))[0] == 502
        status, headers, _ = await gw.chat(asked)
        assert status == 502 and headers["x-llm-attempts"] == "0"  # from memory, as it should be
        path.write_text(text.replace("KEY", "sk-new"))
        assert await reloader.reload("SIGHUP")
        status, headers, _ = await gw.chat(asked)
        assert status == 200 and headers["x-llm-attempts"] == "1"
