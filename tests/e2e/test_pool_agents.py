"""Pools with the real clients at stock settings (issue #34): Claude Code (`claude -p`), Codex
(`codex exec`), the `anthropic` and `openai` SDKs, through the gateway started as README says,
in front of one fake upstream that plays three keys of one provider (it tells deployments
apart by the credential, with each key's own limits and states: gateway/fake/limits.py).

Held here, counting the calls that reach each key:
- one key of three limited for an hour: every turn answered at once by the others, and no call
  reaches the limited key after the one that told the gateway;
- every key limited: the client gets the earliest reset, one call per key;
- a revoked key: dropped after one 401;
- a 20-turn Claude Code session (a tool loop) stays on one key.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.fake.messages import sign
from gateway.fake.responses_rules import seal
from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.e2e.test_claude_code import claude_bin, run_claude, tool_use_turn
from tests.e2e.test_codex import codex
from tests.fakeupstream import FakeUpstream, Seq, Stream, response_object, sse

pytestmark = pytest.mark.e2e
__all__ = ["claude_bin", "codex"]  # fixtures shared with the agents' own test modules

CLAUDE_KEYS = ("sk-ant-a", "sk-ant-b", "sk-ant-c")
OPENAI_KEYS = ("sk-a", "sk-b", "sk-c")


@pytest.fixture(scope="module")
def keys() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        f.require_key = True  # a request without a key is refused, as the real APIs refuse it
        yield f


@pytest.fixture
def fake(keys: FakeUpstream) -> FakeUpstream:
    keys.steps.clear()
    keys.requests.clear()
    keys.always = None
    for k in (*CLAUDE_KEYS, *OPENAI_KEYS):
        keys.keys.restore(k)
    keys.keys.calls.clear()
    return keys


def _config(fake: FakeUpstream, port: int, strategy: str) -> str:
    lines = [f"server: {{port: {port}, drain_s: 2}}", "upstreams:"]
    for k in CLAUDE_KEYS:
        lines.append(f"  - {{name: anthropic-{k[-1]}, base_url: '{fake.url}', api_key: {k}, "
                     "key_header: x-api-key, apis: [messages]}")  # fmt: skip
    for k in OPENAI_KEYS:
        lines.append(f"  - {{name: openai-{k[-1]}, base_url: '{fake.url}', api_key: {k}, apis: [chat, responses]}}")
    lines += [
        "pools:",
        f"  - {{name: claude, models: ['claude-*'], strategy: {strategy}, "
        "deployments: [anthropic-a, anthropic-b, anthropic-c]}",
        f"  - {{name: gpt, models: ['gpt-*'], strategy: {strategy}, deployments: [openai-a, openai-b, openai-c]}}",
        "timeouts: {connect_s: 2, first_byte_s: 20, idle_s: 20}",
    ]
    return "\n".join(lines) + "\n"


def _launch(fake: FakeUpstream, tmp: Path, strategy: str) -> RunningGateway:
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(_config(fake, port, strategy))
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log")


# A gateway per test: what one learnt of the keys (sit-outs) must not decide the next.
@pytest.fixture
def gateway(keys: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = _launch(keys, tmp_path_factory.mktemp("poolgw"), "weighted")
    yield gw
    gw.stop()


@pytest.fixture
def headroom_gateway(keys: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = _launch(keys, tmp_path_factory.mktemp("poolhr"), "headroom")
    yield gw
    gw.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def _access(gw: RunningGateway, since: int = 0) -> list[dict[str, Any]]:
    out = []
    for line in gw.logs().splitlines()[since:]:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("event") == "request":
            out.append(doc)
    return out


def _lines(gw: RunningGateway) -> int:
    return len(gw.logs().splitlines())


def test_claude_code_with_one_key_limited_for_an_hour_is_answered_by_the_others(
    claude_bin: Path, gateway: RunningGateway, fake: FakeUpstream, workdir: Path
) -> None:
    fake.keys.limited_until("sk-ant-b", time.time() + 3600)
    for _ in range(4):
        r = run_claude(claude_bin, gateway, workdir)
        assert r.rc == 0, (r.out, r.err)
        assert "Hello from fake." in r.out
        assert r.seconds < 30
    calls = fake.calls_by_key()
    assert calls.get("sk-ant-b", 0) <= 1  # the one that told the gateway, if it was picked at all
    assert calls.get("sk-ant-a", 0) + calls.get("sk-ant-c", 0) >= 4


def test_claude_code_with_every_key_limited_gets_the_earliest_reset(
    claude_bin: Path, gateway: RunningGateway, fake: FakeUpstream, workdir: Path
) -> None:
    now = time.time()
    for key, wait in zip(CLAUDE_KEYS, (3600, 600, 1200), strict=True):
        fake.keys.limited_until(key, now + wait)
    since = _lines(gateway)
    r = run_claude(claude_bin, gateway, workdir, timeout=120)
    assert r.rc != 0
    # The access line is written after the answer (flushed within 50 ms): wait for it.
    gateway.logs_when(lambda _t: any(a["path"] == "/v1/messages" for a in _access(gateway, since)))
    answered = [a for a in _access(gateway, since) if a["path"] == "/v1/messages"]
    assert answered and all((a["status"], a["error_type"]) == (429, "rate_limit") for a in answered), [
        (a["status"], a["error_type"], a["attempts"], a.get("from_memory"), a.get("evidence")) for a in answered]
    calls = fake.calls_by_key()
    assert sum(calls.get(k, 0) for k in CLAUDE_KEYS) == 3  # one per key, then known: no more calls
    # The earliest reset is what the client is told (the anthropic SDK shows the headers), for
    # the model Claude Code asked for: a rate limit is the model's (pipeline/pool.py).
    model = fake.messages_requests()[0].json()["model"]
    client = anthropic.Anthropic(base_url=gateway.base, api_key="dummy")  # stock: max_retries=2
    try:
        with pytest.raises(anthropic.RateLimitError) as e:
            client.messages.create(model=model, max_tokens=64,
                                   messages=[{"role": "user", "content": "hi there"}])  # fmt: skip
    finally:
        client.close()
    h = e.value.response.headers
    assert 590 <= int(h["retry-after"]) <= 601  # whole seconds, rounded up
    assert abs(int(h["x-llm-error-reset-at"]) / 1000 - (now + 600)) < 15
    assert h["x-should-retry"] == "false"
    assert sum(fake.calls_by_key().get(k, 0) for k in CLAUDE_KEYS) == 3  # the SDK's own call reached no key


def test_a_revoked_key_is_dropped_after_one_401(
    claude_bin: Path, gateway: RunningGateway, fake: FakeUpstream, workdir: Path
) -> None:
    fake.keys.revoke("sk-ant-c")
    for _ in range(3):
        r = run_claude(claude_bin, gateway, workdir)
        assert r.rc == 0, (r.out, r.err)
    assert fake.calls_by_key().get("sk-ant-c", 0) <= 1
    # The line is written by the log thread (within 50 ms): Claude Code may exit first.
    logs = gateway.logs_when(lambda t: '"reason":"auth"' in t)
    assert '"reason":"auth"' in logs or fake.calls_by_key().get("sk-ant-c", 0) == 0


@pytest.mark.parametrize("strategy", ["weighted", "headroom"])
def test_a_twenty_turn_claude_code_session_stays_on_one_key(
    claude_bin: Path, keys: FakeUpstream, fake: FakeUpstream, workdir: Path, strategy: str,
    tmp_path: Path, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    gw = _launch(keys, tmp_path, strategy)
    request.addfinalizer(gw.stop)
    turns = 20

    def loop(payload: dict[str, Any]) -> Any:
        done = sum(1 for m in payload.get("messages", []) for b in (m.get("content") or [])
                   if isinstance(b, dict) and b.get("type") == "tool_result")  # fmt: skip
        if done < turns - 1:
            return tool_use_turn(done + 1, "Bash", {"command": f"echo step {done + 1}", "description": "a step"})
        return None  # the fake's own answer ends the run

    fake.always = loop
    r = run_claude(claude_bin, gw, workdir, "run the steps", timeout=240)
    assert r.rc == 0, (r.out, r.err[-2000:])
    sent = fake.messages_requests()
    assert len(sent) >= turns
    used = {req.headers.get("x-api-key") for req in sent}
    sessions = {req.headers.get("x-claude-code-session-id") for req in sent}
    assert len(sessions) == 1
    assert len(used) == 1, fake.calls_by_key()


def test_codex_with_one_key_limited_and_one_revoked_is_answered_by_the_third(
    codex: Path, gateway: RunningGateway, fake: FakeUpstream, tmp_path: Path
) -> None:
    fake.keys.limited_until("sk-a", time.time() + 3600)
    fake.keys.revoke("sk-b")
    for i in range(3):
        r = _codex(codex, gateway, tmp_path / f"run{i}")
        assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
        assert "Hello from fake." in r.stdout
    calls = fake.calls_by_key()
    assert calls.get("sk-a", 0) <= 1 and calls.get("sk-b", 0) <= 1
    assert calls.get("sk-c", 0) >= 3


def _codex(codex: Path, gw: RunningGateway, home: Path) -> subprocess.CompletedProcess[str]:
    """`codex exec` at its stock retry settings, pointed at the gateway by a provider entry."""
    codex_home = home / "codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "gw"\napproval_policy = "never"\nsandbox_mode = "read-only"\n'
        f'[model_providers.gw]\nname = "gw"\nbase_url = "{gw.base}/v1"\nwire_api = "responses"\n'
        'env_key = "GW_KEY"\nrequires_openai_auth = false\n'
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "GW_KEY": "dummy"}
    return subprocess.run([str(codex), "exec", "--skip-git-repo-check", "say hi"], env=env, cwd=home,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip


def test_the_openai_sdk_sees_one_answer_and_every_attempt_counted(gateway: RunningGateway, fake: FakeUpstream) -> None:
    fake.keys.limited_until("sk-a", time.time() + 3600)
    fake.keys.limited_until("sk-b", time.time() + 3600)
    client = openai.OpenAI(base_url=gateway.base + "/v1", api_key="dummy")  # stock settings
    try:
        for i in range(6):
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": f"question {i}"}])
            assert raw.headers["x-llm-upstream"] == "openai-c"
            assert raw.parse().choices[0].message.content
    finally:
        client.close()
    calls = fake.calls_by_key()
    assert calls.get("sk-a", 0) <= 1 and calls.get("sk-b", 0) <= 1 and calls.get("sk-c", 0) == 6


def _thinking_then_bash(key: str | None, orgs: dict[str, str], thinks: bool = True, call_id: str = "toolu_01") -> Stream:
    """A tool-calling turn that starts with signed thinking, as Anthropic streams it, signed for
    the organization of the key that asked (Anthropic binds a signature to the account); without
    it (``thinks``: False) as a request asked with thinking off is answered."""
    thought = "The user wants the date: run it."
    msg = {"id": f"msg_think_{uuid.uuid4().hex[:8]}", "type": "message", "role": "assistant",
           "model": "claude-opus-4-8", "content": [], "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": 30, "output_tokens": 1}}  # fmt: skip
    signature = sign(thought, orgs.get(key or ""))
    thinking = [
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "thinking_delta", "thinking": thought}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "signature_delta", "signature": signature}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ] if thinks else []  # fmt: skip
    at = len(thinking) and 1
    return Stream([
        sse("message_start", {"type": "message_start", "message": msg}),
        *thinking,
        sse("content_block_start", {"type": "content_block_start", "index": at,
                                    "content_block": {"type": "tool_use", "id": call_id, "name": "Bash", "input": {}}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": at, "delta": {
            "type": "input_json_delta", "partial_json": json.dumps({"command": "date", "description": "the date"})}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": at}),
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                              "usage": {"output_tokens": 20}}),
        sse("message_stop", {"type": "message_stop"}),
    ], then="eof")  # fmt: skip


@pytest.mark.xfail(strict=True, reason=(
    "Claude Opus 5.5 (Claude Code 2.1.332's model) thinks on every request and binds a thinking block to "
    "the conversation before it: the loop's first step after the move goes in words (the first key's "
    "thinking cannot go, nor thinking off), but the new key's thinking is then bound to that text, and the "
    "next step, sent as Claude Code keeps it, is refused ('bound to a different conversation', then "
    "'Expected `thinking`'). Open: every later step of such a loop would have to go as the first did."))
def test_a_claude_code_tool_loop_moved_to_a_key_of_another_organization_goes_on(
    claude_bin: Path, keys: FakeUpstream, fake: FakeUpstream, workdir: Path, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """Claude Code (stock settings: Claude Opus 5.5, which thinks on every request) calls a tool;
    its key is then limited, and the tool's result goes to a key of another organization, which
    refuses the first key's thinking signature as Anthropic does. The gateway asks once more
    without that thinking; the loop's turn then lacks the block Anthropic wants first in it while
    thinking is on ("Expected `thinking` or `redacted_thinking`, but found `tool_use`"), and Opus
    5.5 refuses thinking off, so that turn and its result go in words (before: asked without
    `thinking`, which that model reads as thinking on, refused, and Claude Code stopped with
    "API Error: 400"). The new key calls the tool again, with its own thinking, and the loop's
    next step goes on: the run ends well, instead of failing every turn until the session is
    started over."""
    orgs = {k: f"org-{k[-1]}" for k in CLAUDE_KEYS}
    fake.orgs = orgs
    request.addfinalizer(lambda: setattr(fake, "orgs", {}))
    gw = _launch(keys, tmp_path, "weighted")
    request.addfinalizer(gw.stop)
    served: list[str] = []
    moved = f"toolu_moved{uuid.uuid4().hex[:8]}"  # an id no other test's script gave

    def loop(payload: dict[str, Any]) -> Any:
        asked_by = fake._key
        results = sum(1 for m in payload.get("messages", []) if isinstance(m.get("content"), list)
                      for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")  # fmt: skip
        in_words = "[the tool Bash (id " in json.dumps(payload)
        if not results and not in_words:
            if asked_by is not None and not served:
                served.append(asked_by)
                fake.keys.limited_until(asked_by, time.time() + 3600)  # from the next request on
            return _thinking_then_bash(asked_by, orgs)
        if results == 1 or (in_words and not results):  # the move's request, as the gateway asked it
            thinks = payload.get("thinking", {}).get("type") != "disabled"
            return _thinking_then_bash(asked_by, orgs, thinks=thinks, call_id=moved)
        return None  # the fake's own answer ends the run

    fake.always = loop
    r = run_claude(claude_bin, gw, workdir, "what is the date?", timeout=180)
    assert r.rc == 0, (r.out, r.err[-2000:])
    assert "Hello from fake." in r.out
    [home] = served
    sent = fake.messages_requests()
    moved_on = [s for s in sent if s.headers.get("x-api-key") != home]
    [words] = [s for s in moved_on if b"[the tool Bash (id " in s.body]
    asked = words.json()
    assert asked["model"] == "claude-opus-5-5" and asked["thinking"]["type"] != "disabled"  # its own, kept
    assert all(b.get("type") != "tool_result" for m in asked["messages"] if isinstance(m.get("content"), list)
               for b in m["content"])  # fmt: skip
    home_sig = sign("The user wants the date: run it.", orgs[home])
    assert home_sig.encode() not in words.body  # the first key's thinking went
    step = moved_on[-1]
    assert moved.encode() in step.body and home_sig.encode() not in step.body  # the loop's next step


def _sealed_reasoning_then_exec(key: str | None, orgs: dict[str, str]) -> Stream:
    """A Responses turn that reasons (its encrypted_content sealed for the organization of the
    key that asked, as OpenAI binds it to the account), then calls Codex's exec_command."""
    seq = Seq()
    args = json.dumps({"cmd": "echo org-marker"})
    call = {"id": "fc_org", "type": "function_call", "status": "completed", "call_id": "call_org_1",
            "name": "exec_command", "arguments": args}  # fmt: skip
    thought = {"id": "rs_org", "type": "reasoning", "summary": [],
               "encrypted_content": seal(orgs.get(key or ""))}  # fmt: skip
    done = {**response_object("gpt-5-codex"), "id": "resp_org", "output": [thought, call]}
    shell = {**done, "status": "in_progress", "output": [], "usage": None}
    return Stream([
        seq("response.created", response=shell),
        seq("response.output_item.added", output_index=0, item=thought),
        seq("response.output_item.done", output_index=0, item=thought),
        seq("response.output_item.added", output_index=1, item={**call, "status": "in_progress", "arguments": ""}),
        seq("response.function_call_arguments.done", item_id="fc_org", output_index=1, arguments=args),
        seq("response.output_item.done", output_index=1, item=call),
        seq("response.completed", response=done),
    ], then="eof")  # fmt: skip


def test_a_codex_tool_loop_moved_to_a_key_of_another_organization_goes_on(
    codex: Path, gateway: RunningGateway, fake: FakeUpstream, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """Codex (stock settings) replays the reasoning item it got, sealed for its key's
    organization; the key is then limited and the tool's output goes to a key of another
    organization, which refuses it (`invalid_encrypted_content`, as OpenAI answers): the gateway
    asks once more without the reasoning and the run ends well."""
    orgs = {k: f"org-{k[-1]}" for k in OPENAI_KEYS}
    fake.orgs = orgs
    request.addfinalizer(lambda: setattr(fake, "orgs", {}))
    served: list[str] = []

    def loop(payload: dict[str, Any]) -> Any:
        asked_by = fake._key
        if not any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in payload.get("input", [])):
            if asked_by is not None and not served:
                served.append(asked_by)
                fake.keys.limited_until(asked_by, time.time() + 3600)  # from the next request on
            return _sealed_reasoning_then_exec(asked_by, orgs)
        return None  # the fake's own answer ends the run

    fake.always = loop
    r = _codex(codex, gateway, tmp_path / "run")
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    assert "Hello from fake." in r.stdout
    [home] = served
    loop_turns = [s for s in fake.responses_requests()
                  if b"function_call_output" in s.body and s.headers.get("authorization") != f"Bearer {home}"]  # fmt: skip
    refused = [s for s in loop_turns if b"rs_org" in s.body]
    kept = [s for s in loop_turns if s not in refused]
    assert len(refused) == 1 and kept
    assert all(i.get("type") != "reasoning" for i in kept[-1].json()["input"])


def _sealed_reasoning_then_text(key: str | None, orgs: dict[str, str], n: int) -> Stream:
    """A reasoning model's answer streamed as OpenAI streams it: a reasoning item sealed for the
    organization of the key that asked (its ``n``th, its own value), then the text."""
    seq = Seq()
    org = orgs.get(key or "", "")
    thought = {"id": f"rs_{org}_{n}", "type": "reasoning", "summary": [], "encrypted_content": seal(org, str(n))}
    done = response_object("gpt-5-codex", text=f"Fine, says {org}.", rid=f"resp_{org}_{n}")
    message = done["output"][0]
    done["output"] = [thought, message]
    shell = {**done, "status": "in_progress", "output": [], "usage": None}
    return Stream([
        seq("response.created", response=shell),
        seq("response.output_item.added", output_index=0, item={**thought, "encrypted_content": None}),
        seq("response.output_item.done", output_index=0, item=thought),
        seq("response.output_item.added", output_index=1, item={**message, "status": "in_progress", "content": []}),
        seq("response.output_text.delta", item_id=message["id"], output_index=1, content_index=0,
            delta=message["content"][0]["text"], logprobs=[]),
        seq("response.output_item.done", output_index=1, item=message),
        seq("response.completed", response=done),
    ], then="eof")  # fmt: skip


def test_a_codex_session_moved_to_a_key_of_another_organization_pays_one_refused_call_once(
    codex: Path, gateway: RunningGateway, fake: FakeUpstream, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """Codex (stock settings, `codex exec` then `exec resume --last`) sends back every reasoning
    item of the session. Its key limited after two turns, the third turn goes to a key of another
    organization: one refused call (`invalid_encrypted_content`) for the old key's items, then
    the answer; the fourth goes without the old key's items from the start and with the new
    key's own. Before, every turn after the move was refused once and sent with no reasoning."""
    orgs = {k: f"org-{k[-1]}" for k in OPENAI_KEYS}
    fake.orgs = orgs
    request.addfinalizer(lambda: setattr(fake, "orgs", {}))
    answered: list[str | None] = []

    def answer(payload: dict[str, Any]) -> Any:
        answered.append(fake._key)
        return _sealed_reasoning_then_text(fake._key, orgs, len(answered))

    fake.always = answer
    home = tmp_path / "run"
    assert _codex(codex, gateway, home).returncode == 0
    codex_home = home / "codex"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "GW_KEY": "dummy"}
    for turn in range(2, 5):
        if turn == 3:
            fake.keys.limited_until(answered[-1] or "", time.time() + 3600)
        r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "resume", "--last", f"turn {turn}"],
                           env=env, cwd=home, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
        assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    first, moved = answered[1], answered[-1]
    assert answered[:2] == [first, first] and answered[2:] == [moved, moved] and moved != first
    sent = [s.json() for s in fake.responses_requests() if s.headers.get("authorization") == f"Bearer {moved}"]
    sealed = [[i["encrypted_content"] for i in s["input"] if i.get("type") == "reasoning"] for s in sent]
    # Turn 3: refused with the old key's two items, then asked without them; turn 4: the new key's own.
    assert [len(s) for s in sealed] == [2, 0, 1]
    assert sealed[2] == [seal(orgs[moved], "3")]
