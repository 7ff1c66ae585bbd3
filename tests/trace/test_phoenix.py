"""The gateway's traces as a real backend (Arize Phoenix) receives them over OTLP, with tracing
switched on the way operators do it (OTEL_EXPORTER_OTLP_ENDPOINT), driven by the openai SDK
carrying an agent's traceparent: a retry, a fallback, a compress-and-retry and a continued
stream each arrive as the tree docs/operations/tracing.md shows, under the agent's span, with nothing
secret in them; and a dead collector changes nothing for the client."""

from __future__ import annotations

import os
import subprocess
import time

import openai
import pytest

from tests.convo import agent_conversation
from tests.fakeupstream import Reply, Stream, anthropic_error, chunk
from tests.procs import ROOT, free_port
from tests.spans import PROMPT, SECRET_KEY, Node, render, roots, secrets_in

pytestmark = pytest.mark.trace

AGENT_SPAN = "b7ad6b7169203331"
UNAVAILABLE = Reply(503, {"error": {"message": "overloaded", "type": "server_error"}})


@pytest.fixture
def trace_id() -> str:
    # One trace per test: Phoenix files a trace under the project of its first span.
    return os.urandom(16).hex()


def client(base: str, trace_id: str) -> openai.OpenAI:
    """The agent: its span is the gateway's parent. The SDK's own retries off, so every
    retry in the trace is the gateway's."""
    return openai.OpenAI(base_url=base + "/v1", api_key=SECRET_KEY, max_retries=0,
                         default_headers={"traceparent": f"00-{trace_id}-{AGENT_SPAN}-01"})


def one_request(nodes: list[Node], trace_id: str, attempts: int) -> Node:
    (server,) = roots(nodes)
    print(render(server))
    assert server.trace_id == trace_id and server.parent_id == AGENT_SPAN  # the agent's span is the parent
    assert server.name == "POST /v1/chat/completions" and len(server.children) == attempts
    assert all(n.trace_id == trace_id for n in nodes)
    assert secrets_in(nodes, SECRET_KEY, PROMPT) == []
    return server


def upstream(name: str, url: str, extra: str = "") -> str:
    return f"  - {{name: {name}, base_url: '{url}'{extra}}}\n"


def test_a_retry(traced, fake, trace_id) -> None:
    gw = traced(upstream("primary", fake.url, f", api_key: '{SECRET_KEY}'"))
    fake.script(UNAVAILABLE)
    answer = client(gw.gateway.base, trace_id).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}])
    assert answer.choices[0].message.content
    server = one_request(gw.spans(3), trace_id, attempts=2)
    first, retry = (c.attributes for c in server.children)
    assert first["llm_gateway.attempt.kind"] == "first" and first["error.type"] == "provider_unavailable"
    assert first["llm_gateway.decision"] == "retry" and first["llm_gateway.retry.wait_source"] == "backoff"
    assert first["http.response.status_code"] == 503 and first["llm_gateway.error.retryable"] is True
    assert retry["llm_gateway.attempt.kind"] == "retry" and retry["gen_ai.response.id"] == "chatcmpl-fake123"
    assert server.attributes["gen_ai.usage.output_tokens"] > 0
    # The upstream was sent each attempt's own context, in the agent's trace.
    sent = [r.headers["traceparent"] for r in fake.chat_requests()]
    assert sent == [f"00-{trace_id}-{c.span_id}-01" for c in server.children]
    # The request's log line names the trace.
    line = gw.gateway.logs_when(lambda t: '"event":"request"' in t)
    assert f'"trace_id":"{trace_id}","span_id":"{server.span_id}"' in line


def test_a_fallback(traced, fake, backup, trace_id) -> None:
    gw = traced(upstream("primary", fake.url, ", fallbacks: [backup]")
                + upstream("backup", backup.url, ", models: ['never'], apis: [messages]"),
                "fallback: {retries_per_upstream: 0}\n")
    fake.script(UNAVAILABLE)
    client(gw.gateway.base, trace_id).chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    server = one_request(gw.spans(3), trace_id, attempts=2)
    first, moved = (c.attributes for c in server.children)
    assert first["llm_gateway.decision"] == "fallback" and first["llm_gateway.fallback.to"] == "backup"
    assert moved["llm_gateway.attempt.kind"] == "fallback" and moved["llm_gateway.upstream"] == "backup"
    assert moved["llm_gateway.translated"] == "chat->messages" and moved["gen_ai.provider.name"] == "anthropic"
    assert server.attributes["llm_gateway.fallbacks"] == 1


def test_a_compress_and_retry(traced, fake, trace_id) -> None:
    gw = traced(upstream("primary", fake.url))
    fake.context_limit = 16000
    answer = client(gw.gateway.base, trace_id).chat.completions.create(
        model="gpt-4o-mini", messages=agent_conversation(40), max_tokens=1000)
    assert answer.choices[0].message.content
    server = one_request(gw.spans(3), trace_id, attempts=2)
    first, rescue = (c.attributes for c in server.children)
    assert first["error.type"] == "context_overflow"
    assert rescue["llm_gateway.attempt.kind"] == "compress_retry"
    assert rescue["llm_gateway.compression.detector"] == first["llm_gateway.error.evidence"]
    s = server.attributes
    assert s["llm_gateway.compression.result"] == "success"
    assert s["llm_gateway.compression.tokens_before"] > 16000 > s["llm_gateway.compression.tokens_after"]


def test_a_continued_stream(traced, fake, trace_id) -> None:
    gw = traced(upstream("primary", fake.url, ", continuation: prefix"))
    fake.script(
        Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Once upon"})], then="drop"),
        Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": " a time."}), chunk({}, "stop")]),
    )
    stream = client(gw.gateway.base, trace_id).chat.completions.create(
        model="gpt-4o-mini", stream=True, messages=[{"role": "user", "content": "Tell a story"}])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Once upon a time."
    server = one_request(gw.spans(3), trace_id, attempts=2)
    broken, cont = server.children
    assert broken.attributes["llm_gateway.ended_by"] == "stream_broken"
    assert {"llm_gateway.first_byte", "llm_gateway.first_visible_token"} <= set(broken.events)
    assert cont.attributes["llm_gateway.attempt.kind"] == "continuation"
    assert cont.attributes["llm_gateway.continuation.mode"] == "prefix"
    assert server.attributes["llm_gateway.continuation.outcome"] == "continued"
    assert "llm_gateway.first_byte_to_client" in server.events


def test_a_dead_collector_changes_nothing_for_clients_and_its_queue_stays_bounded(traced, fake, trace_id) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gw = traced(upstream("primary", fake.url),
                env={"OTEL_EXPORTER_OTLP_ENDPOINT": dead, "OTEL_BSP_MAX_QUEUE_SIZE": "16"})
    c = client(gw.gateway.base, trace_id)
    for _ in range(60):  # 120 spans into a 16-span queue that never drains
        answer = c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
    log = gw.gateway.logs_when(lambda t: "Queue full" in t)
    assert "Queue full, dropping Span" in log  # the SDK dropped spans instead of keeping them
    assert "Connection refused" in log  # the exporter's thread said why, in the gateway's log
    # And a stop is not held up by spans that cannot leave (the bound is 2 s).
    assert gw.gateway.stop() == 0
    assert '"event":"stopped"' in gw.gateway.logs()
    assert log.count('"event":"request"') >= 50 and '"status":200' in log


CLAUDE = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"


def test_claude_code_through_a_traced_gateway(traced, fake, tmp_path) -> None:
    """Claude Code as a user runs it (headless, stock settings): its turn, with one 529 the
    gateway retried, arrives in Phoenix as a Messages request span with its attempts."""
    if not CLAUDE.exists():
        pytest.skip("!!! CLAUDE CODE NOT TESTED: not installed (scripts/test-deps.sh installs it) !!!")
    gw = traced(upstream("primary", fake.url),
                "retry: {provider_unavailable: {max_retries: 2, base_delay_s: 0.05, max_delay_s: 0.2}}\n")
    fake.script(anthropic_error(529, "overloaded_error", "Overloaded"))
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANTHROPIC_AUTH_TOKEN": SECRET_KEY,
           "ANTHROPIC_BASE_URL": gw.gateway.base, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    r = subprocess.run([str(CLAUDE), "-p", "say hi"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    nodes = gw.spans(1)
    deadline = time.monotonic() + 30
    while not any(n.name == "POST /v1/messages" and len(n.children) >= 2 for n in roots(nodes)):
        assert time.monotonic() < deadline, [render(n) for n in roots(nodes)]
        time.sleep(0.5)
        nodes = gw.spans(len(nodes) + 1, timeout_s=1)
    turn = next(n for n in roots(nodes) if n.name == "POST /v1/messages" and len(n.children) >= 2)
    print(render(turn))
    first, retry = turn.children[:2]
    assert first.attributes["error.type"] == "provider_unavailable" and first.attributes["http.response.status_code"] == 529
    assert first.attributes["llm_gateway.decision"] == "retry" and retry.attributes["llm_gateway.attempt.kind"] == "retry"
    assert retry.attributes["gen_ai.provider.name"] == "anthropic" and retry.attributes["llm_gateway.upstream_api"] == "messages"
    assert secrets_in(nodes, SECRET_KEY, "say hi") == []
