"""Faults on the primary of a two-upstream chain, as a new user meets them: `fallbacks:
[backup]` on the primary, the documented defaults otherwise (timeouts shortened so the run
takes minutes, not hours; they are printed), streamed and buffered chat completions from the
real `openai` SDK at its stock settings. The backup declares `continuation: replay` (it
cannot prefill) and the requests ask for `temperature: 0`.

For each fault: upstream calls per upstream, the time to the answer (to the last byte), and
whether the answer is complete and exact (the full 60-word text, a normal finish). Then a
flapping primary under steady traffic: down (503) for a while, then healthy; how long after
its recovery requests are served by it again.

Run: ``python -m bench.fallback`` (about three minutes), also printed by ``bench.faults``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.app import create_app
from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.server import make_runner
from tests.fakeupstream import Drop, FakeUpstream, Hang, Reply, Stream, chat_completion, chunk

WORDS = [f" w{i:02d}" for i in range(60)]
ANSWER = "".join(WORDS)
ROLE = chunk({"role": "assistant", "content": ""})
REQUEST: dict[str, Any] = {"model": "gpt-4o-mini", "temperature": 0, "messages": [{"role": "user", "content": "go"}]}
FIRST_BYTE_S, IDLE_S, FIRST_TOKEN_S = 3.0, 5.0, 2.0
PAUSE_S = 4.0  # the slow first token: after the head and the role chunk, under idle_s
OUTAGE_S, TIMELINE_S, EVERY_S = 45.0, 90.0, 0.5


def _full() -> list[Any]:
    return [ROLE, *(chunk({"content": w}) for w in WORDS), chunk({}, "stop")]


class Upstream(FakeUpstream):
    """Answers ANSWER when nothing is scripted; 503 while ``down_until`` has not passed."""

    down_until = 0.0

    def _default(self, payload: dict[str, Any]) -> Any:
        if time.monotonic() < self.down_until:
            return Reply(503, {"error": {"message": "Service Unavailable", "type": "server_error", "code": None}})
        if payload.get("stream"):
            return Stream(_full())
        return Reply(200, chat_completion(content=ANSWER, completion_tokens=len(WORDS)))


RATE_LIMITED = {"error": {"message": "Rate limit reached for requests", "type": "requests",
                          "code": "rate_limit_exceeded"}}  # fmt: skip


def _many(step: Any) -> list[Any]:
    return [step] * 12  # more than any request's attempts: the fault is persistent


PREFILL_REFUSED = Reply(400, {"error": {"message": "This model does not support assistant message prefill. "
                                                   "The conversation must end with a user message.",
                                        "type": "invalid_request_error", "code": None}})  # fmt: skip
# The case as it was: the only fallback declares prefill and refuses it (backup steps).
CUT_PREFILL_REFUSED = "cut after 40 tokens, backup `prefill` (refused) instead of `replay`"

# name -> (primary steps when streamed, when buffered)
FAULTS: dict[str, tuple[list[Any], list[Any]]] = {
    "429 with `retry-after: 1`, persistent": (_many(Reply(429, RATE_LIMITED, {"retry-after": "1"})),) * 2,
    "429 without `retry-after`, persistent": (_many(Reply(429, RATE_LIMITED)),) * 2,
    "503, persistent": (_many(Reply(503, {"error": {"message": "Service Unavailable"}})),) * 2,
    "reset before the head, persistent": (_many(Drop()),) * 2,
    "silent: accepts, never sends a head": (_many(Hang(60)),) * 2,
    f"head at once, first token after {PAUSE_S:g} s": (
        _many(Stream(_full(), pause_s=PAUSE_S)), _many(Reply(200, chat_completion(content=ANSWER), delay_s=PAUSE_S))),
    "cut after 40 tokens": ([Stream(_full()[:41], then="drop")], _many(Stream(_full()[:41], then="drop"))),
    CUT_PREFILL_REFUSED: ([Stream(_full()[:41], then="drop")], _many(Stream(_full()[:41], then="drop"))),
    "stall after 40 tokens": ([Stream(_full()[:41], then="stall")], _many(Stream(_full()[:41], then="stall"))),
}


@dataclass
class Result:
    verdict: str
    seconds: float
    primary: int
    backup: int


def config_text(primary: str, backup: str) -> tuple[str, bool]:
    """The chain's config, and whether this build has ``timeouts.first_token_s``."""
    base = (f"upstreams:\n  - {{name: primary, base_url: '{primary}', fallbacks: [backup]}}\n"
            f"  - {{name: backup, base_url: '{backup}', models: ['never-routed-here'], continuation: replay}}\n")
    for first_token, extra in ((True, f", first_token_s: {FIRST_TOKEN_S:g}"), (False, "")):
        text = base + f"timeouts: {{first_byte_s: {FIRST_BYTE_S:g}, idle_s: {IDLE_S:g}{extra}}}\n"
        try:
            parse_config(text, env={})
        except ConfigError:
            continue
        return text, first_token
    raise AssertionError("unreachable: the config without first_token_s is valid")


class Chain:
    def __init__(self, backup_mode: str = "replay") -> None:
        self.backup_mode = backup_mode
        self.primary, self.backup = Upstream(), Upstream()
        self.runner: web.AppRunner | None = None
        self.first_token = False

    async def __aenter__(self) -> Chain:
        await self.primary.start()
        await self.backup.start()
        text, self.first_token = config_text(self.primary.url, self.backup.url)
        text = text.replace("continuation: replay", f"continuation: {self.backup_mode}")
        cfg: GatewayConfig = parse_config(text, env={})
        self.runner = make_runner(create_app(cfg, registry=CollectorRegistry()), shutdown_timeout=0.2)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
        await self.primary.close()
        await self.backup.close()

    def client(self) -> openai.AsyncOpenAI:
        assert self.runner is not None
        return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1", api_key="k")

    def calls(self) -> tuple[int, int]:
        return len(self.primary.chat_requests()), len(self.backup.chat_requests())


async def ask(client: openai.AsyncOpenAI, stream: bool) -> tuple[str, str]:
    """The verdict on one answer, and the upstream that served it (``x-llm-upstream``)."""
    text, finish = "", None
    try:
        if stream:
            raw = await client.chat.completions.with_raw_response.create(**REQUEST, stream=True)
            async for c in raw.parse():
                if c.choices:
                    text += c.choices[0].delta.content or ""
                    finish = c.choices[0].finish_reason or finish
        else:
            raw = await client.chat.completions.with_raw_response.create(**REQUEST)
            done = raw.parse()
            text, finish = done.choices[0].message.content or "", done.choices[0].finish_reason
    except openai.APIStatusError as e:
        return f"error {e.status_code} {e.type or ''}".strip(), ""
    except openai.APIError as e:
        typed = "x_llm_error_type" in json.dumps(getattr(e, "body", None) or {})
        what = "typed error event" if typed else f"error: {type(e).__name__}"
        return f"{what} after {len(text)}/{len(ANSWER)} chars", ""
    served = raw.headers.get("x-llm-upstream", "")
    if finish == "stop" and text == ANSWER:
        return "complete, exact", served
    return f"incomplete ({len(text)}/{len(ANSWER)} chars, finish {finish!r})", served


async def one_fault(steps: list[Any], stream: bool, backup: list[Any] | None = None) -> Result:
    async with Chain("prefill" if backup else "replay") as chain:
        chain.primary.script(*steps)
        chain.backup.script(*(backup or []))
        client = chain.client()
        started = time.monotonic()
        try:
            verdict, _ = await asyncio.wait_for(ask(client, stream), 120)
        except TimeoutError:
            verdict = "hang (over 120 s)"
        seconds = time.monotonic() - started
        await client.close()
        return Result(verdict, seconds, *chain.calls())


@dataclass
class Timeline:
    back_after_s: float | None  # from the primary's recovery to its first answer again
    requests: int
    exact: int
    primary: int
    backup: int


async def flapping(stream: bool) -> Timeline:
    """Steady traffic (one request every EVERY_S, sequential) while the primary is down for
    OUTAGE_S, then healthy; until TIMELINE_S."""
    async with Chain() as chain:
        start = time.monotonic()
        chain.primary.down_until = start + OUTAGE_S
        client = chain.client()
        back: float | None = None
        n = exact = 0
        while (now := time.monotonic()) - start < TIMELINE_S:
            verdict, served = await ask(client, stream)
            n += 1
            exact += verdict == "complete, exact"
            if back is None and now >= chain.primary.down_until and served == "primary":
                back = now - chain.primary.down_until
            await asyncio.sleep(max(0.0, EVERY_S - (time.monotonic() - now)))
        await client.close()
        return Timeline(back, n, exact, *chain.calls())


def main(print_: Callable[[str], None] = print) -> None:
    _, first_token = config_text("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    print_("\nfallback: faults on the primary of primary -> backup (backup: `continuation: replay`)\n")
    print_(f"timeouts: first_byte_s {FIRST_BYTE_S:g}, idle_s {IDLE_S:g}, first_token_s "
           + (f"{FIRST_TOKEN_S:g}" if first_token else "(not in this build)") + "; other settings default\n")
    print_("| fault on the primary | streamed: answer | time | calls primary / backup "
           "| buffered: answer | time | calls primary / backup |")
    print_("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (streamed, buffered) in FAULTS.items():
        backup = [PREFILL_REFUSED] if name == CUT_PREFILL_REFUSED else None
        s = asyncio.run(one_fault(list(streamed), True, backup))
        b = asyncio.run(one_fault(list(buffered), False))  # a buffered cut fails over whole
        print_(f"| {name} | {s.verdict} | {s.seconds:.1f} s | {s.primary} / {s.backup} "
               f"| {b.verdict} | {b.seconds:.1f} s | {b.primary} / {b.backup} |")

    async def both() -> list[Timeline]:
        return list(await asyncio.gather(flapping(True), flapping(False)))

    s_line, b_line = asyncio.run(both())
    print_(f"\nflapping primary: down (503) for {OUTAGE_S:g} s, then healthy; one request every {EVERY_S:g} s "
           f"for {TIMELINE_S:g} s\n")
    print_("| | requests | complete, exact | calls primary / backup | back on the primary after its recovery |")
    print_("| --- | --- | --- | --- | --- |")
    for label, t in (("streamed", s_line), ("buffered", b_line)):
        back = f"{t.back_after_s:.1f} s" if t.back_after_s is not None else f"never (run ended {TIMELINE_S - OUTAGE_S:g} s after)"
        print_(f"| {label} | {t.requests} | {t.exact} | {t.primary} / {t.backup} | {back} |")


if __name__ == "__main__":
    main()
