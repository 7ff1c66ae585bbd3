"""A spent budget (and an expired key) stops the real clients at once (issue #35), at stock settings: Claude Code
(`claude -p`), Codex (`codex exec`), the `openai` and `anthropic` SDKs. Each is counted: how
many requests it sent the gateway for one turn, and that none reached the provider.

The gateway runs as docs/quick-start.md says (`python -m gateway --config`) with one named key whose daily
budget the first request spends (prices made up: $1 a token), in front of the fake upstream.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.e2e.test_claude_code import claude_bin, run_claude
from tests.e2e.test_codex import codex
from tests.fakeupstream import FakeUpstream

pytestmark = pytest.mark.e2e
__all__ = ["claude_bin", "codex"]  # fixtures shared with the agents' own test modules

KEY = "gk-alice-0123456789"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        yield f


@pytest.fixture
def spent(fake: FakeUpstream, tmp_path: Path) -> Iterator[RunningGateway]:
    """A gateway whose key has spent its budget: one request of $26 against $20 a day."""
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 1}}\n"
        f"upstreams: [{{name: fake, base_url: '{fake.url}', api_key: sk-operator}}]\n"
        # gpt-4o-mini has a shipped price, which a bare '*' (tried after the shipped table) leaves be.
        "prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}, '*': {input: 1000000, output: 2000000}}\n"
        f"keys: [{{name: alice, key: {KEY}, budget: {{usd: 20, period: day}}}}]\n"
    )
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp_path / "gw.log")
    try:
        body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "spend"}]}).encode()
        req = urllib.request.Request(gw.base + "/v1/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        for _ in range(100):  # settled once the reservation is gone
            state = _state(gw)
            if state["budget"]["reserved_usd"] == 0:
                break
            time.sleep(0.02)
        assert state["budget"]["spent_usd"] >= 20
        fake.requests.clear()
        yield gw
    finally:
        gw.stop()


def _state(gw: RunningGateway) -> dict[str, Any]:
    req = urllib.request.Request(gw.base + "/v1/gateway/key", headers={"x-api-key": KEY})
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def _refusals(gw: RunningGateway, error_type: str, at_least: int = 1) -> list[dict[str, Any]]:
    """The access lines of requests refused with ``error_type``, once ``at_least`` are there,
    and 0.2 s more for any beyond them. The gateway writes a line within 50 ms of its answer:
    a fixed 0.2 s alone was a guess a loaded host could miss."""

    def found(text: str) -> list[dict[str, Any]]:
        complete = text[: text.rfind("\n") + 1]  # a line being written may be there only in part
        lines = [json.loads(ln) for ln in complete.splitlines() if ln.startswith("{")]
        return [ln for ln in lines if ln.get("event") == "request" and ln.get("error_type") == error_type]

    gw.logs_when(lambda text: len(found(text)) >= at_least, timeout_s=10)
    time.sleep(0.2)
    return found(gw.logs())


def _refused(gw: RunningGateway, at_least: int = 1) -> list[dict[str, Any]]:
    """The access lines of requests the budget refused."""
    return _refusals(gw, "budget", at_least)


def codex_home(tmp_path: Path, gw: RunningGateway) -> tuple[Path, dict[str, str]]:
    """A fresh HOME whose Codex (stock settings but the provider) talks to ``gw`` with the key."""
    home = tmp_path / "home"
    (home / "codex").mkdir(parents=True)
    (home / "codex" / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "gw"\napproval_policy = "never"\nsandbox_mode = "read-only"\n'
        f'[model_providers.gw]\nname = "gw"\nbase_url = "{gw.base}/v1"\nwire_api = "responses"\n'
        'env_key = "GW_KEY"\nrequires_openai_auth = false\n'
    )
    return home, {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(home / "codex"), "GW_KEY": KEY}


def test_claude_code_stops_at_once_on_a_spent_budget(claude_bin: Path, spent: RunningGateway, fake: FakeUpstream,
                                                     tmp_path: Path) -> None:  # fmt: skip
    workdir = tmp_path / "project"
    workdir.mkdir()
    r = run_claude(claude_bin, spent, workdir, ANTHROPIC_AUTH_TOKEN=KEY, timeout=120)
    assert r.rc != 0
    assert "budget" in (r.out + r.err).lower()
    refused = _refused(spent)
    assert [ln["status"] for ln in refused] == [402]  # one call: Claude Code did not retry it
    assert fake.requests == []


def test_codex_stops_at_once_and_says_its_usage_limit_was_hit(codex: Path, spent: RunningGateway,
                                                              fake: FakeUpstream, tmp_path: Path) -> None:  # fmt: skip
    home, env = codex_home(tmp_path, spent)
    t0 = time.monotonic()
    r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "say hi"], env=env, cwd=home,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode != 0
    assert "usage limit" in (r.stdout + r.stderr).lower(), r.stderr[-2000:]
    refused = _refused(spent)
    assert [ln["status"] for ln in refused] == [429]  # one call: no retry, no reconnect
    assert time.monotonic() - t0 < 30
    assert fake.requests == []


def test_the_sdks_stop_at_once(spent: RunningGateway, fake: FakeUpstream) -> None:
    oa = openai.OpenAI(base_url=spent.base + "/v1", api_key=KEY)  # stock: max_retries=2
    an = anthropic.Anthropic(base_url=spent.base, api_key=KEY)
    try:
        with pytest.raises(openai.APIStatusError) as e:
            oa.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert e.value.status_code == 402 and "spent $26.00 of its $20.00 daily budget" in str(e.value)
        with pytest.raises(anthropic.APIStatusError) as f:
            an.messages.create(model="claude-opus-4-8", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert f.value.status_code == 402
    finally:
        oa.close()
        an.close()
    assert [ln["status"] for ln in _refused(spent, 2)] == [402, 402]
    assert fake.requests == []


def test_codex_stops_at_once_on_a_model_its_key_may_not_use(codex: Path, fake: FakeUpstream, tmp_path: Path) -> None:
    """Codex retries a 403 five times (measured: 6 requests, 7 s) and stops at once on a 400:
    a key limited to other models answers Codex a 400 with the same words."""
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 1}}\n"
        f"upstreams: [{{name: fake, base_url: '{fake.url}', api_key: sk-operator}}]\n"
        f"keys: [{{name: alice, key: {KEY}, models: ['claude-*']}}]\n"
    )
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp_path / "gw.log")
    try:
        home, env = codex_home(tmp_path, gw)
        fake.requests.clear()
        r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "say hi"], env=env, cwd=home,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode != 0
        assert "may not use model 'gpt-5-codex'" in r.stdout + r.stderr, r.stderr[-2000:]
        refused = [ln["status"] for ln in _refusals(gw, "auth")]
        assert refused == [400]  # one request: Codex did not retry it
        assert fake.requests == []
    finally:
        gw.stop()


@pytest.fixture
def expired(fake: FakeUpstream, tmp_path: Path) -> Iterator[RunningGateway]:
    """A gateway whose one key expired an hour ago."""
    port = free_port()
    config = tmp_path / "gateway.yaml"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    config.write_text(
        f"server: {{port: {port}, drain_s: 1}}\n"
        f"upstreams: [{{name: fake, base_url: '{fake.url}', api_key: sk-operator}}]\n"
        f"keys: [{{name: alice, key: {KEY}, expires_at: '{at}'}}]\n"
    )
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp_path / "gw.log")
    fake.requests.clear()
    try:
        yield gw
    finally:
        gw.stop()


def _expired_refusals(gw: RunningGateway) -> list[int]:
    return [ln["status"] for ln in _refusals(gw, "auth")]


def test_claude_code_stops_on_an_expired_key_and_says_so(claude_bin: Path, expired: RunningGateway,
                                                         fake: FakeUpstream, tmp_path: Path) -> None:  # fmt: skip
    workdir = tmp_path / "project"
    workdir.mkdir()
    r = run_claude(claude_bin, expired, workdir, ANTHROPIC_AUTH_TOKEN=KEY, timeout=120)
    assert r.rc != 0
    assert "the gateway key 'alice' expired at" in r.out + r.err
    assert _expired_refusals(expired) == [401]  # one call: Claude Code does not retry a 401
    assert fake.requests == []


def test_codex_stops_on_an_expired_key_and_says_so(codex: Path, expired: RunningGateway, fake: FakeUpstream,
                                                   tmp_path: Path) -> None:  # fmt: skip
    home, env = codex_home(tmp_path, expired)
    t0 = time.monotonic()
    r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "say hi"], env=env, cwd=home,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode != 0
    assert "the gateway key 'alice' expired at" in r.stdout + r.stderr, r.stderr[-2000:]
    # Codex retries a 401 as it does a 403 (measured with 0.171: 6 requests, 7 s) and stops at
    # once on a 400: it gets the refusal as a 400.
    assert _expired_refusals(expired) == [400]
    assert time.monotonic() - t0 < 60
    assert fake.requests == []


def test_codex_stops_at_once_on_a_wrong_key(codex: Path, expired: RunningGateway, fake: FakeUpstream,
                                            tmp_path: Path) -> None:  # fmt: skip
    """A key that matches none (mistyped, revoked) is answered Codex as a 400 too (it was 6
    requests in 6.6 s of "Reconnecting... 1/5" to 5/5, audit)."""
    home, env = codex_home(tmp_path, expired)
    env["GW_KEY"] = "gk-mistyped-0123456789"
    r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "say hi"], env=env, cwd=home,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode != 0
    assert "invalid_client_key" in r.stdout + r.stderr, r.stderr[-2000:]
    assert "Reconnecting" not in r.stdout + r.stderr
    assert _expired_refusals(expired) == [400]
    assert fake.requests == []


def test_claude_code_counting_a_file_keeps_its_turn_within_a_tokens_per_minute_key(
    claude_bin: Path, fake: FakeUpstream, tmp_path: Path
) -> None:
    """`claude -p "summarize @big.txt"` with a 172 KB file counts it twice
    (/v1/messages/count_tokens) before its turn. Counted as generations, the counts took
    2 x (50,000 + 4,096) of a 120,000-token minute, the turn was refused 429 and Claude Code
    waited out the minute: 70 s instead of about 1 (audit). A count now takes nothing of it."""
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 1}}\n"
        f"upstreams: [{{name: fake, base_url: '{fake.url}', api_key: sk-operator}}]\n"
        f"keys: [{{name: alice, key: {KEY}, tokens_per_minute: 120000}}]\n"
    )
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "big.txt").write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog\n"
                                             for i in range(3_300)))  # fmt: skip
    assert (workdir / "big.txt").stat().st_size > 170_000
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp_path / "gw.log")
    fake.requests.clear()
    try:
        while time.time() % 60 > 40:  # the turn and its counts within one minute
            time.sleep(1)
        r = run_claude(claude_bin, gw, workdir, "summarize @big.txt", ANTHROPIC_AUTH_TOKEN=KEY, timeout=120)
        assert r.rc == 0, (r.out + r.err)[-2000:]
        assert r.seconds < 30
        gw.logs_when(lambda text: '"path":"/v1/messages"' in text.replace(" ", ""), timeout_s=10)
        time.sleep(0.2)
        lines = [json.loads(ln) for ln in gw.logs().splitlines() if ln.startswith("{")]
        asked = [(ln["path"], ln["status"]) for ln in lines if ln.get("event") == "request"]
        assert ("/v1/messages/count_tokens", 200) in asked, asked
        assert all(status == 200 for path, status in asked if path.startswith("/v1/messages")), asked
        minute = _state(gw)["this_minute"]
        assert minute["requests"] == sum(1 for path, _ in asked if path == "/v1/messages")  # the counts not among them
    finally:
        gw.stop()
