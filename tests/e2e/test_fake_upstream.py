"""The fake upstream as docs/quick-start.md "Try it without a provider" runs it: ``python -m gateway.fake``
and the gateway on ``config/examples/fake.yaml``, each a subprocess, driven by the real openai
and anthropic SDKs (``max_retries=0``, so every recovery seen is the gateway's own) and by raw
HTTP where a stream's last event is the point. Each scenario, on the APIs it is documented for."""

from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.convo import agent_conversation
from tests.e2e.test_claude_code import claude_bin  # noqa: F401  (the installed CLI, a fixture)
from tests.e2e.test_codex import codex  # noqa: F401  (the installed CLI, a fixture)
from tests.procs import ROOT, RunningProcess, base_env, free_port, start

pytestmark = pytest.mark.e2e

WAIT_S = 0.3  # the fake's --wait-s: what its 429 asks for


@dataclass
class Demo:
    fake: RunningProcess
    gw: RunningProcess

    def fake_lines(self, scenario: str) -> list[str]:
        """What the fake answered each request of ``scenario`` with (its stdout)."""
        return re.findall(rf"scenario={scenario} -> (.+)", self.fake.logs())

    clients: list[openai.OpenAI | anthropic.Anthropic] = field(default_factory=list)

    # One client of each, closed when the module is done: an SDK client left to the garbage
    # collector closes its sockets at a random later moment, as a ResourceWarning in some
    # other test (an error under filterwarnings=error).
    def oa(self) -> openai.OpenAI:
        found = [c for c in self.clients if isinstance(c, openai.OpenAI)]
        if not found:
            found = [openai.OpenAI(base_url=self.gw.base + "/v1", api_key="unused", max_retries=0)]
            self.clients.append(found[0])
        return found[0]  # type: ignore[return-value]

    def an(self) -> anthropic.Anthropic:
        found = [c for c in self.clients if isinstance(c, anthropic.Anthropic)]
        if not found:
            found = [anthropic.Anthropic(base_url=self.gw.base, api_key="unused", max_retries=0)]
            self.clients.append(found[0])
        return found[0]  # type: ignore[return-value]

    def stream(self, path: str, payload: dict[str, Any]) -> bytes:
        req = urllib.request.Request(self.gw.base + path, data=json.dumps({**payload, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return bytes(r.read())


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    tmp = tmp_path_factory.mktemp("fakedemo")
    fake_port, gw_port = free_port(), free_port()
    fake = start([sys.executable, "-m", "gateway.fake", "--port", str(fake_port), "--wait-s", str(WAIT_S)],
                 base_env(), fake_port, tmp / "fake.log", ready_path="/v1/models")
    try:
        env = base_env(GATEWAY_PORT=str(gw_port), UPSTREAM_BASE_URL=f"http://127.0.0.1:{fake_port}/v1")
        gw = start([sys.executable, "-m", "gateway", "--config", str(ROOT / "config/examples/fake.yaml")], env,
                   gw_port, tmp / "gateway.log")
        demo = Demo(fake, gw)
        try:
            yield demo
        finally:
            for client in demo.clients:
                client.close()
            gw.stop()
    finally:
        fake.stop()


def test_429_with_a_wait_is_waited_out_and_retried(demo: Demo) -> None:
    r = demo.oa().chat.completions.with_raw_response.create(
        model="gpt-4o-mini-429", messages=[{"role": "user", "content": "hi"}])
    assert r.parse().choices[0].message.content and r.headers["x-llm-attempts"] == "2"
    assert demo.fake_lines("429") == [f"429 (retry-after: {WAIT_S:g})", "answer"]


def test_503_and_529_on_messages_are_retried(demo: Demo) -> None:
    for model in ("claude-sonnet-4-5-503", "claude-sonnet-4-5-529"):
        r = demo.an().messages.with_raw_response.create(
            model=model, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert r.parse().content[0].type == "text" and r.headers["x-llm-attempts"] == "2"
    assert demo.fake_lines("503") == ["503", "answer"] and demo.fake_lines("529") == ["529", "answer"]


def test_down_opens_the_circuit(demo: Demo) -> None:
    statuses = []
    for i in range(4):
        with pytest.raises(openai.APIStatusError) as e:
            demo.oa().chat.completions.create(model="down", messages=[{"role": "user", "content": f"turn {i}"}])
        statuses.append((e.value.status_code, e.value.response.headers["x-llm-attempts"]))
    # provider_unavailable.max_retries: 2 in the example, spent by the first request; the next
    # ones meet the noted outage and get one attempt each (docs/errors/loop-breaker.md); the
    # circuit opens after 3 failed requests.
    assert statuses == [(503, "3"), (503, "1"), (503, "1"), (503, "0")]


def test_down_on_two_models_leaves_the_other_models_answered(demo: Demo) -> None:
    # A newcomer trying `down` on two models: fake.yaml keeps the upstream's own circuit shut
    # (models_to_open), so `ok` still answers; only each down model's circuit opens.
    for i, model in enumerate(["gpt-4o-mini-down", "claude-sonnet-4-5-down"] * 2):
        with pytest.raises(openai.APIStatusError):
            demo.oa().chat.completions.create(model=model, messages=[{"role": "user", "content": f"try {i}"}])
    r = demo.oa().chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "still there?"}])
    assert r.parse().choices[0].message.content and r.headers["x-llm-attempts"] == "1"


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_overflow_is_compressed_once_on_every_api(demo: Demo, api: str) -> None:
    convo = agent_conversation(30)
    if api == "chat":
        r: Any = demo.oa().chat.completions.with_raw_response.create(model="gpt-4o-mini-overflow", messages=convo)
    elif api == "messages":
        turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: " + "log line " * 80}
                 for i in range(31)]
        r = demo.an().messages.with_raw_response.create(model="claude-overflow", max_tokens=64, messages=turns)
    else:
        items = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: " + "log line " * 80}
                 for i in range(31)]
        r = demo.oa().responses.with_raw_response.create(model="gpt-5-codex-overflow", input=items)
    assert r.headers["x-llm-compressed"] == "true" and r.headers["x-llm-attempts"] == "2"
    assert r.parse() is not None


def test_a_cut_stream_ends_with_a_typed_error_and_a_stall_with_a_timeout(demo: Demo) -> None:
    body = demo.stream("/v1/chat/completions", {"model": "gpt-4o-mini-cut", "messages": [{"role": "user", "content": "a"}]})
    events = [json.loads(e) for e in re.findall(rb"^data: (\{.*\})$", body, re.M)]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == "The answer starts"
    assert b"[DONE]" not in body and events[-1]["choices"][0]["finish_reason"] == "error"
    assert events[-1]["error"]["x_llm_error_type"] == "provider_unavailable"
    body = demo.stream("/v1/messages", {"model": "claude-stall", "max_tokens": 16,
                                        "messages": [{"role": "user", "content": "b"}]})
    names = re.findall(rb"^event: (\S+)$", body, re.M)
    assert names[-1] == b"error" and b"message_stop" not in names
    assert demo.fake_lines("cut") == ["stream, then drop"] and demo.fake_lines("stall") == ["stream, then stall"]


def test_an_empty_stream_is_probed_and_answered(demo: Demo) -> None:
    stream = demo.oa().chat.completions.create(model="gpt-4o-mini-empty", stream=True,
                                               messages=[{"role": "user", "content": "c"}])
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Hello from the fake upstream."
    assert demo.fake_lines("empty") == ["empty stream", "empty stream", "answer"]


def test_the_fake_documents_its_scenarios() -> None:
    import subprocess

    r = subprocess.run([sys.executable, "-m", "gateway.fake", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0
    from gateway.fake.scenarios import SCENARIOS

    # Every scenario the fake plays, not a list written here: a new one must reach both.
    page = (ROOT / "docs" / "quick-start.md").read_text()
    for name in SCENARIOS:
        assert re.search(rf"^    {re.escape(name)} ", r.stdout, re.M), name
        assert f"`{name}`" in page, name
    assert Path(ROOT / "config/examples/fake.yaml").exists()


def test_the_fake_plays_a_pool_of_keys(tmp_path: Path) -> None:
    port = free_port()
    fake = start([sys.executable, "-m", "gateway.fake", "--port", str(port), "--limits", "k1=2,1000",
                  "--limited", "k3", "--revoked", "k2"], base_env(), port, tmp_path / "fake.log",
                 ready_path="/v1/models")

    def post(key: str) -> tuple[int, Any]:
        req = urllib.request.Request(fake.base + "/v1/chat/completions", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {key}"},
            data=json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}).encode())
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.headers

    try:
        answers = [post(k) for k in ("k1", "k1", "k1", "k2", "k3")]
        assert [status for status, _ in answers] == [200, 200, 429, 401, 429]
        assert [h["x-ratelimit-remaining-requests"] for _, h in answers[:3]] == ["1", "0", "0"]
        assert answers[0][1]["x-ratelimit-limit-tokens"] == "1000" and answers[2][1]["retry-after"] == "30"
        assert 3590 <= int(answers[4][1]["retry-after"]) <= 3600
        logs = fake.logs()
        assert "key k1: 2 requests/min, 1000 tokens/min" in logs and "chat key=k2 refused -> 401" in logs
    finally:
        fake.stop()


def test_the_pool_tour_as_printed(tmp_path: Path) -> None:
    """The quick start's pool tour: the fake with one key limited, the gateway on fake-pool.yaml, and the
    curl loop exactly as printed (run by bash), with the ports the test was given."""
    page = (ROOT / "docs" / "quick-start.md").read_text()
    block = page[page.index("A pool (see [Pools](pools.md)) can be tried"):]
    script = re.search(r"```sh\n(.*?)```", block, re.S)
    assert script is not None
    lines = script.group(1).split("\n")
    assert lines[0].startswith("python -m gateway.fake --limited fake-key-b")
    assert lines[1].startswith("make run CONFIG=config/examples/fake-pool.yaml")
    loop = "\n".join(lines[2:])
    fake_port, gw_port = free_port(), free_port()
    fake = start([sys.executable, "-m", "gateway.fake", "--port", str(fake_port), "--limited", "fake-key-b"],
                 base_env(), fake_port, tmp_path / "fake.log", ready_path="/v1/models")
    try:
        env = base_env(GATEWAY_PORT=str(gw_port), UPSTREAM_BASE_URL=f"http://127.0.0.1:{fake_port}/v1")
        gw = start([sys.executable, "-m", "gateway", "--config", str(ROOT / "config/examples/fake-pool.yaml")],
                   env, gw_port, tmp_path / "gateway.log")
        try:
            import subprocess

            out = subprocess.run(["bash", "-c", loop.replace("127.0.0.1:8080", f"127.0.0.1:{gw_port}")],
                                 capture_output=True, text=True, timeout=60).stdout.lower()
        finally:
            gw.stop()
    finally:
        fake.stop()
    upstreams = re.findall(r"x-llm-upstream: (\S+)", out)
    attempts = re.findall(r"x-llm-attempts: (\d+)", out)
    assert len(upstreams) == len(attempts) == 6
    assert set(upstreams) <= {"key-a", "key-c"}
    assert attempts.count("2") <= 1 and set(attempts) <= {"1", "2"}
    assert fake.logs().count("fake-key-b") <= 2  # the fake's line for the one call, if any


@pytest.fixture(scope="module")
def chat_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The quick start's tool loop: the fake as it ships, the gateway on the default config with
    UPSTREAM_APIS=chat (`make run`'s command, on the ports the test was given)."""
    tmp = tmp_path_factory.mktemp("faketool")
    fake_port, gw_port = free_port(), free_port()
    fake = start([sys.executable, "-m", "gateway.fake", "--port", str(fake_port)], base_env(), fake_port,
                 tmp / "fake.log", ready_path="/v1/models")  # fmt: skip
    try:
        env = base_env(GATEWAY_PORT=str(gw_port), UPSTREAM_BASE_URL=f"http://127.0.0.1:{fake_port}/v1",
                       UPSTREAM_APIS="chat")  # fmt: skip
        gw = start([sys.executable, "-m", "gateway", "--config", str(ROOT / "config/gateway.yaml")], env, gw_port,
                   tmp / "gateway.log")  # fmt: skip
        try:
            yield Demo(fake, gw)
        finally:
            gw.stop()
    finally:
        fake.stop()


def _tool_lines(demo: Demo, since: int) -> list[tuple[str, str]]:
    """(API, what the fake answered) of each `tool` request it logged after offset ``since``."""
    return re.findall(r"^fake: (\w+)(?: key=\S+)? model=\S+ scenario=tool -> (.+)$", demo.fake.logs()[since:], re.M)


def test_claude_code_runs_the_tool_scenario_on_a_chat_only_upstream_as_printed(
    claude_bin: Path, chat_only: Demo, tmp_path: Path  # noqa: F811
) -> None:
    import subprocess

    page = (ROOT / "docs" / "quick-start.md").read_text()
    [line] = re.findall(r"^ANTHROPIC_BASE_URL=\S+ ANTHROPIC_AUTH_TOKEN=dummy \S*claude --model \S+-tool .*$", page, re.M)
    [written] = re.findall(r"^ANTHROPIC_BASE_URL=\S+ ANTHROPIC_AUTH_TOKEN=dummy (\S*claude) --model", page, re.M)
    # The page's path is the one `make test` installs to, from the checkout's root; run here in
    # a scratch folder (the agent's working directory), it is the same file, named absolutely.
    assert (ROOT / written).resolve() == claude_bin.resolve(), written
    assert "`UPSTREAM_APIS=chat make run`" in page
    home = tmp_path / "home"
    home.mkdir()
    since = len(chat_only.fake.logs())
    env = {"PATH": f"{claude_bin.parent}:/usr/bin:/bin", "HOME": str(home)}  # a fresh user, no login
    line = line.replace("http://127.0.0.1:8080", chat_only.gw.base).replace(f" {written} ", f" {claude_bin} ", 1)
    r = subprocess.run(["bash", "-c", line], cwd=tmp_path,
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "The tool answered: hello from a shell tool" in r.stdout
    lines = _tool_lines(chat_only, since)
    assert ("chat", "tool call Bash") in lines, lines  # translated: the fake spoke chat only
    # 2.1.332 appends a `<system-reminder>` of the tokens left to the result: its start is the output.
    assert any(api == "chat" and said.startswith("answer (tool result came back: 'hello from a shell tool")
               for api, said in lines), lines  # fmt: skip


def test_codex_runs_the_tool_scenario_on_a_chat_only_upstream(
    codex: Path, chat_only: Demo, tmp_path: Path  # noqa: F811
) -> None:
    import subprocess

    section = (ROOT / "docs" / "agents" / "codex.md").read_text()
    toml = re.search(r"```toml\n(.*?)```", section, re.S)
    assert toml is not None
    home = tmp_path / "home"
    (home / "codex").mkdir(parents=True)
    config = toml.group(1).replace('"gpt-5-codex"', '"gpt-5-codex-tool"')  # as the quick start's sentence says
    (home / "codex" / "config.toml").write_text(config.replace("http://127.0.0.1:8080", chat_only.gw.base))
    since = len(chat_only.fake.logs())
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(home / "codex"), "GW_KEY": "dummy"}
    r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "run a command"], env=env, cwd=home,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    # The fake's answer quotes the result it got: Codex's exec_command output, the echo within.
    answer = r.stdout[r.stdout.index("The tool answered: "):]
    assert "hello from a shell tool" in answer and "exited with code 0" in answer
    lines = _tool_lines(chat_only, since)
    assert ("chat", "tool call exec_command") in lines, lines
    assert any(said.startswith("answer (tool result came back: ") for api, said in lines if api == "chat"), lines
