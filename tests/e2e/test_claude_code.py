"""Claude Code itself, headless (`claude -p`), through the gateway (a subprocess) in front
of the fake upstream speaking Anthropic Messages. What Claude Code sends and how it
retries on its own is measured in CLAUDE_CODE_NOTES.md; these tests hold the gateway to
what that implies: its retries and Claude Code's never multiply, a final error reaches
Claude Code in a form it stops on, and an overflowing tool-using run survives.

Claude Code is installed from npm into .cache/ (scripts/test-deps.sh does the same for
`make test`); the tests skip, loudly, only when that install is impossible."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, RunningGateway, base_env, free_port, start
from tests.e2e.pins import pinned
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Stream,
    anthropic_error,
    anthropic_head,
    anthropic_message,
    anthropic_overflow,
    anthropic_tail,
    sse,
    text_delta,
)

pytestmark = pytest.mark.e2e

PREFIX = ROOT / ".cache" / "claude-code"
CLAUDE = PREFIX / "node_modules" / ".bin" / "claude"
OVERLOADED = anthropic_error(529, "overloaded_error", "Overloaded")
RATE = {"type": "error", "error": {"type": "rate_limit_error",
                                   "message": "Number of request tokens has exceeded your per-minute rate limit"}}  # fmt: skip
GATEWAY_RETRIES = 5  # provider_unavailable.max_retries in the config below


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    if not os.access(CLAUDE, os.X_OK):
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("!!! CLAUDE CODE NOT TESTED: npm is not installed (scripts/test-deps.sh installs it) !!!")
        r = subprocess.run([npm, "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund",
                            f"@anthropic-ai/claude-code@{pinned('CLAUDE_CODE_VERSION')}"],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
        if r.returncode != 0 or not os.access(CLAUDE, os.X_OK):
            pytest.skip(f"!!! CLAUDE CODE NOT TESTED: npm install @anthropic-ai/claude-code failed: "
                        f"{(r.stderr or r.stdout)[-800:]} !!!")  # fmt: skip
    v = subprocess.run([str(CLAUDE), "--version"], capture_output=True, text=True, timeout=60)
    if v.returncode != 0:
        pytest.skip(f"!!! CLAUDE CODE NOT TESTED: `claude --version` failed here: {v.stderr[-800:]} !!!")
    return CLAUDE


def launch(fake: FakeUpstream, tmp: Path, extra_yaml: str = "", upstream_yaml: str = "") -> RunningGateway:
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 2}}\n"
        f"upstreams: [{{name: primary, base_url: '{fake.url}'{upstream_yaml}}}]\n"
        "retry:\n"
        f"  provider_unavailable: {{max_retries: {GATEWAY_RETRIES}, base_delay_s: 0.05, max_delay_s: 0.2}}\n"
        "  rate_limit: {max_retries: 3, base_delay_s: 0.05, max_delay_s: 0.2}\n"
        # The breaker is not under test here: keep it shut so attempts can be counted exactly.
        "circuit_breaker: {failure_threshold: 1000, open_s: 1}\n"
        "timeouts: {connect_s: 2, first_byte_s: 20, idle_s: 20}\n" + extra_yaml
    )
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log")


@pytest.fixture(scope="module")
def cc_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch(fake, tmp_path_factory.mktemp("ccgw"))
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def rescue_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch(fake, tmp_path_factory.mktemp("ccrescue"),
                "compression: {enabled: true, self_compacting_clients: rescue}\n")
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def prefill_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch(fake, tmp_path_factory.mktemp("ccprefill"), upstream_yaml=", continuation: prefill")
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def replay_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch(fake, tmp_path_factory.mktemp("ccreplay"), upstream_yaml=", continuation: replay_any")
    yield gw
    gw.stop()


@dataclass
class Run:
    rc: int | None  # None: killed at the timeout
    out: str
    err: str
    seconds: float


def run_claude(claude_bin: Path, gw: RunningGateway, cwd: Path, prompt: str = "say hi",
               timeout: float = 60, **env: str) -> Run:  # fmt: skip
    """`claude -p` as a user in CI runs it: a clean environment, a fresh HOME, no login."""
    home = cwd.parent / f"home-{uuid.uuid4().hex[:6]}"
    home.mkdir()
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANTHROPIC_AUTH_TOKEN": "dummy",
             "ANTHROPIC_BASE_URL": gw.base, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **env}  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.Popen([str(claude_bin), "-p", prompt], cwd=cwd, env=clean, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
        rc: int | None = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        rc = None
    return Run(rc, out, err, time.monotonic() - t0)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def tool_use_turn(n: int, name: str, tool_input: dict[str, Any]) -> Stream:
    """An assistant turn that calls one tool, streamed as Anthropic does (a unique message id:
    Claude Code merges assistant messages that share one)."""
    msg = {"id": f"msg_tool{n}_{uuid.uuid4().hex[:8]}", "type": "message", "role": "assistant",
           "model": "claude-opus-4-8", "content": [], "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": 30, "output_tokens": 1}}  # fmt: skip
    return Stream([
        sse("message_start", {"type": "message_start", "message": msg}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "tool_use", "id": f"toolu_{n:02d}", "name": name, "input": {}}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(tool_input)}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                              "usage": {"output_tokens": 20}}),
        sse("message_stop", {"type": "message_stop"}),
    ], then="eof")  # fmt: skip


def test_claude_code_answers_through_the_gateway(claude_bin, cc_gateway, upstream: FakeUpstream, workdir) -> None:
    r = run_claude(claude_bin, cc_gateway, workdir)
    assert r.rc == 0, (r.out, r.err)
    assert "Hello from fake." in r.out
    [sent] = upstream.messages_requests()
    assert sent.method == "POST" and sent.query == "beta=true"
    h = sent.headers
    assert h["anthropic-version"] == "2023-06-01" and "claude-code-20250219" in h["anthropic-beta"]
    assert h["x-claude-code-session-id"] and h["Authorization"] == "Bearer dummy"
    body = sent.json()
    assert body["stream"] is True and len(body["tools"]) > 5 and body["messages"][0]["role"] == "user"


def test_claude_codes_model_discovery_lists_the_gateways_models(
    claude_bin, cc_gateway, upstream: FakeUpstream, workdir
) -> None:
    """Claude Code's model discovery (its LLM-gateway docs: CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1)
    asks `GET /v1/models?limit=1000` with `anthropic-version` at start-up, and caches the
    claude*/anthropic* ids in <config dir>/cache/gateway-models.json, where its /model picker
    reads them ("From gateway"). It runs only with nonessential traffic allowed. The upstream
    here answers in OpenAI's shape, as an OpenAI-compatible provider does."""
    upstream.models_listing = {"object": "list", "data": [
        {"id": "claude-opus-4-8", "object": "model", "created": 1767225600, "owned_by": "fake"},
        {"id": "gpt-4o-mini", "object": "model", "created": 0, "owned_by": "fake"}]}  # fmt: skip
    try:
        r = run_claude(claude_bin, cc_gateway, workdir, CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY="1",
                       CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="", DISABLE_TELEMETRY="1")  # fmt: skip
    finally:
        upstream.models_listing = None
    assert r.rc == 0, (r.out, r.err)
    [listed] = [q for q in upstream.requests if q.path == "/v1/models"]
    assert listed.query == "limit=1000" and listed.headers["Authorization"] == "Bearer dummy"
    [cached] = workdir.parent.glob("home-*/.claude/cache/gateway-models.json")
    doc = json.loads(cached.read_text())
    assert doc["baseUrl"] == cc_gateway.base
    assert doc["models"] == [{"id": "claude-opus-4-8", "display_name": "claude-opus-4-8"}]


def cut_answer(model: str = "claude-opus-4-8") -> Stream:
    return Stream([*anthropic_head(model), text_delta("The "), text_delta("answer is ")], then="drop")


# A model that takes a prefill: Claude 4.6 and later refuse any ("This model does not support
# assistant message prefill"), Claude Code's default claude-opus-4-8 among them.
PREFILL_MODEL = "claude-sonnet-4-5"


def test_a_stream_cut_mid_answer_is_continued_and_claude_code_prints_it_whole(
    claude_bin, prefill_gateway, upstream: FakeUpstream, workdir
) -> None:
    def continuation(payload: dict[str, Any]) -> Stream:
        last = payload["messages"][-1]
        assert last == {"role": "assistant", "content": "The answer is"}, last  # trailing space left out
        return Stream([*anthropic_head(PREFILL_MODEL), text_delta(" forty-two."), *anthropic_tail(4)],
                      then="eof")  # fmt: skip

    upstream.script(cut_answer(PREFILL_MODEL), continuation)
    # Thinking off: the API refuses prefill with extended thinking, so the gateway would not ask.
    r = run_claude(claude_bin, prefill_gateway, workdir, "what is the answer?", MAX_THINKING_TOKENS="0",
                   ANTHROPIC_MODEL=PREFILL_MODEL)  # fmt: skip
    assert r.rc == 0, (r.out, r.err)
    assert r.out.strip() == "The answer is forty-two."
    assert len(upstream.messages_requests()) == 2  # Claude Code itself sent one request
    assert upstream.messages_requests()[0].json()["thinking"] == {"type": "disabled"}


def test_with_thinking_on_claude_code_gets_the_typed_error_and_resends_the_turn(
    claude_bin, prefill_gateway, upstream: FakeUpstream, workdir
) -> None:
    """Claude Code's default requests carry adaptive thinking: no prefill is attempted (the
    API refuses prefill with thinking); the cut ends with one typed error event and Claude
    Code asks again, without streaming (measured: its fallback after a broken stream)."""
    upstream.script(cut_answer(), lambda p: Stream([*anthropic_head("claude-opus-4-8"), text_delta("Forty-two."),
                                                    *anthropic_tail(3)], then="eof") if p.get("stream")
                    else Reply(200, anthropic_message("claude-opus-4-8", "Forty-two.")))  # fmt: skip
    r = run_claude(claude_bin, prefill_gateway, workdir, "what is the answer?")
    sent = [req.json() for req in upstream.messages_requests()]
    assert sent[0]["thinking"]["type"] == "adaptive"
    assert len(sent) == 2 and not sent[1].get("stream")  # Claude Code's own non-streaming retry
    assert all(m["role"] != "assistant" for m in sent[1]["messages"])  # not a prefill
    assert r.rc == 0, (r.out, r.err)
    assert "Forty-two." in r.out


def thinking_then_text(thought: str, texts: list[str], then: str) -> Stream:
    """Adaptive thinking's shape: a signed thinking block, then the text block (index 1)."""
    head = anthropic_head("claude-opus-4-8")
    return Stream([
        head[0],
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "thinking_delta", "thinking": thought}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "signature_delta", "signature": "c2lnbmVk"}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("content_block_start", {"type": "content_block_start", "index": 1,
                                    "content_block": {"type": "text", "text": ""}}),
        *(text_delta(t, 1) for t in texts),
        *([t.replace(b'"index": 0', b'"index": 1') for t in anthropic_tail(9)] if then == "eof" else []),
    ], then=then)  # fmt: skip


def test_with_thinking_on_a_cut_answer_is_finished_by_a_replay_and_printed_whole(
    claude_bin, replay_gateway, upstream: FakeUpstream, workdir
) -> None:
    """Prefill cannot serve Claude Code's default requests (adaptive thinking); replay can: the
    same request again, its thinking dropped (Claude Code has its own), its text relayed only
    past what was shown."""
    upstream.script(thinking_then_text("Recall it.", ["The ", "answer is "], "drop"),
                    thinking_then_text("Recall the answer.", ["The answer", " is forty", "-two."], "eof"))
    r = run_claude(claude_bin, replay_gateway, workdir, "what is the answer?")
    assert r.rc == 0, (r.out, r.err)
    assert r.out.strip() == "The answer is forty-two."
    first, second = (req.json() for req in upstream.messages_requests())
    assert first["thinking"]["type"] == "adaptive" and first == second  # one Claude Code request, replayed


def test_an_answer_whose_stream_resets_after_its_stop_reason_is_printed_once(
    claude_bin, cc_gateway, upstream: FakeUpstream, workdir
) -> None:
    """The upstream resets after the message_delta with the stop_reason: the gateway ends the
    stream as complete and writes the message_stop it owed (the TypeScript SDK's finalMessage()
    needs it). Claude Code 2.1.332 printed the answer either way; it must still, once."""
    upstream.script(Stream([*anthropic_head("claude-opus-4-8"), text_delta("The answer "),
                            text_delta("is forty-two."), *anthropic_tail(5)[:2]], then="drop"))  # fmt: skip
    r = run_claude(claude_bin, cc_gateway, workdir, "what is the answer?")
    assert r.rc == 0, (r.out, r.err)
    assert r.out.strip() == "The answer is forty-two."
    assert len(upstream.messages_requests()) == 1


def test_overloaded_twice_is_absorbed_by_the_gateway(claude_bin, cc_gateway, upstream: FakeUpstream, workdir) -> None:
    upstream.script(OVERLOADED, OVERLOADED)
    r = run_claude(claude_bin, cc_gateway, workdir)
    assert r.rc == 0 and "Hello from fake." in r.out, (r.out, r.err)
    # The gateway retried; Claude Code saw one success and made one call: 1 + 2 retries.
    assert len(upstream.messages_requests()) == 3


def test_permanent_overload_is_bounded_and_ends_the_run(claude_bin, cc_gateway, upstream: FakeUpstream, workdir) -> None:
    upstream.script(*[OVERLOADED] * 100)
    r = run_claude(claude_bin, cc_gateway, workdir, timeout=60)
    assert r.rc not in (0, None), (r.rc, r.out, r.err)
    assert "529" in r.out and "Overloaded" in r.out
    assert r.seconds < 30
    calls = len(upstream.messages_requests())
    # Claude Code 2.1.197 made 3 calls on a 529 whatever `x-should-retry` said; 2.1.332 makes 1
    # when told `x-should-retry: false`, which the gateway stamps once it retried (measured).
    # Should a client repeat anyway, the gateway's memory of an identical request that just
    # failed (SPEC, "Default retry rules") answers its repeats for one window (here the
    # circuit's open_s, 1 s), then lets one probe through per window
    # (docs/errors/loop-breaker.md): one gateway request's worth plus the probes, not 3x that.
    probes = int(r.seconds // 1)
    assert calls <= 1 + GATEWAY_RETRIES + probes, f"{calls} upstream calls for one Claude Code turn"


def test_long_rate_limit_stops_claude_code_at_once(claude_bin, cc_gateway, upstream: FakeUpstream, workdir) -> None:
    # Unless told `x-should-retry: false`, Claude Code waits out every retry-after (no cap) about
    # ten times over: a 40 s limit would hold the run for minutes.
    upstream.script(*[Reply(429, RATE, {"retry-after": "40"})] * 20)
    r = run_claude(claude_bin, cc_gateway, workdir, timeout=20)
    assert r.rc not in (0, None), f"Claude Code still retrying after {r.seconds:.0f}s; stdout: {r.out!r}"
    assert "429" in r.out and len(upstream.messages_requests()) == 1


def _roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body["messages"]]


def _assert_tool_pairs(messages: list[dict[str, Any]]) -> None:
    """Anthropic's rule, with Claude Code's mid-conversation `system` messages allowed anywhere:
    the tool_use ids of an assistant turn are answered, all and only, by the tool_result
    blocks of the next non-system message, which is a user message."""
    convo = [m for m in messages if m["role"] != "system"]
    assert convo[0]["role"] == "user"
    pending: set[str] = set()
    for m in convo:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        if m["role"] == "user":
            assert {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"} == pending
            pending = set()
        else:
            assert not pending
            pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    assert not pending


WINDOW = 200_000  # Claude's context window, in the fake's tokens


def tokens(payload: dict[str, Any]) -> int:
    """The fake provider's count for a whole request (tools and system included), ~3.5 bytes a token."""
    return int(len(json.dumps(payload)) / 3.5)


@dataclass
class Agent:
    """A scripted model for a headless Claude Code run: it asks for `rounds` Read calls (which
    Claude Code really executes), then answers. Any request over WINDOW gets Anthropic's real
    overflow 400; recorded: which requests overflowed."""

    workdir: Path
    rounds: int
    window: int = WINDOW
    asked: int = 0
    overflowed: list[int] | None = None

    def __call__(self, payload: dict[str, Any]) -> Any:
        assert self.overflowed is not None
        used = tokens(payload)
        if used > self.window:
            self.overflowed.append(used)
            return anthropic_overflow(self.window, used)
        if self.asked < self.rounds and not self.overflowed:
            self.asked += 1
            return tool_use_turn(self.asked, "Read", {"file_path": str(self.workdir / f"module_{self.asked}.py")})
        return None  # the fake's normal streamed answer: "Hello from fake."


def agent_run(upstream: FakeUpstream, workdir: Path, rounds: int, lines: int = 1500, window: int = WINDOW) -> Agent:
    for i in range(1, rounds + 1):
        (workdir / f"module_{i}.py").write_text(
            "".join(f"value_{i}_{n} = compute({i}, {n})  # line {n} of module {i}\n" for n in range(lines)))
    agent = Agent(workdir, rounds, window, overflowed=[])
    upstream.script(*[agent] * 100)
    return agent


def _summarising(body: dict[str, Any]) -> bool:
    return "summar" in json.dumps(body["messages"][-1]).lower()


def test_overflowing_tool_run_is_rescued_by_the_gateway_when_configured(
    claude_bin, rescue_gateway, upstream: FakeUpstream, workdir
) -> None:
    agent = agent_run(upstream, workdir, rounds=12)  # ~19k tokens a file: the 11th round overflows
    r = run_claude(claude_bin, rescue_gateway, workdir, prompt="Read the modules and summarise them.")
    assert r.rc == 0 and "Hello from fake." in r.out, (r.rc, r.out, r.err)
    assert agent.overflowed and len(agent.overflowed) == 1, agent.overflowed
    reqs = upstream.messages_requests()
    k = next(i for i, q in enumerate(reqs) if tokens(q.json()) > WINDOW)
    before, after = reqs[k].json(), reqs[k + 1].json()
    assert tokens(after) <= WINDOW and not _summarising(after)  # the gateway's retry, not Claude Code's compaction
    assert reqs[k + 1].headers["x-claude-code-session-id"] == reqs[k].headers["x-claude-code-session-id"]
    _assert_tool_pairs(after["messages"])
    for key in ("system", "tools", "model", "thinking", "metadata", "context_management", "output_config"):
        assert after.get(key) == before.get(key), key
    # Claude Code's mid-conversation system messages are system messages: kept exactly.
    kept = [m for m in after["messages"] if m["role"] == "system"]
    assert kept == [m for m in before["messages"] if m["role"] == "system"], _roles(after)
    assert after["messages"][0] == before["messages"][0]  # the prompt the user typed
    assert len(reqs) == k + 2  # the rescued answer ends the run


def test_long_overflowing_tool_run_is_compacted_by_claude_code_itself(
    claude_bin, cc_gateway, upstream: FakeUpstream, workdir
) -> None:
    # Default `compression.self_compacting_clients: pass_through`: the overflow reaches Claude
    # Code, which (measured) summarises a long enough conversation itself and goes on.
    agent = agent_run(upstream, workdir, rounds=12)
    r = run_claude(claude_bin, cc_gateway, workdir, prompt="Read the modules and summarise them.")
    assert r.rc == 0 and "Hello from fake." in r.out, (r.rc, r.out, r.err)
    reqs = upstream.messages_requests()
    assert len(agent.overflowed or []) == 1 and len(reqs) <= agent.rounds + 5
    k = next(i for i, q in enumerate(reqs) if tokens(q.json()) > WINDOW)
    assert "x-llm-compressed" not in reqs[k + 1].headers


def test_overflow_early_in_a_run_survives_with_the_default_config(
    claude_bin, cc_gateway, upstream: FakeUpstream, workdir
) -> None:
    # Measured on 2.1.197 (CLAUDE_CODE_NOTES.md): with too little history to summarise (one tool
    # round), headless Claude Code prints "Prompt is too long" and exits 1 instead of compacting.
    # Passing such an overflow through ends the run: the failure this project exists to prevent.
    # A smaller model: its window holds Claude Code 2.1.332's ~15k-token first request (2.1.197's
    # was ~37k), not the ~26k-token file read next.
    agent = agent_run(upstream, workdir, rounds=1, window=30_000)
    r = run_claude(claude_bin, cc_gateway, workdir, prompt="Read module_1.py and summarise it.")
    assert agent.overflowed, "the scenario did not overflow"
    assert r.rc == 0 and "Hello from fake." in r.out, (r.rc, r.out.strip(), len(upstream.messages_requests()))
