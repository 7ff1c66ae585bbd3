"""Codex CLI itself (`codex exec`, headless) against the gateway, in front of a fake upstream
that speaks the Responses API. The facts these tests rely on are in CODEX_NOTES.md.

Codex retries in two nested loops (HTTP retries inside stream reconnects; defaults 4 and 5,
30 requests for a permanent 503). The failure tests shrink both to 1 through Codex's own
per-provider knobs, so a run takes seconds: Codex then sends up to 4 requests for one turn.
"""

from __future__ import annotations

import json
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.fake import tool_call
from gateway.fake.steps import Step
from tests.corpus_cases import IN_SAMPLE
from tests.e2e.conftest import FAST_RETRIES, ROOT, RunningGateway, launch_cli
from tests.e2e.pins import pinned
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Stream,
    responses_continuation,
    responses_deltas,
    responses_head,
    responses_overflow,
    responses_stream,
)

pytestmark = pytest.mark.e2e

CODEX_VERSION = pinned("CODEX_VERSION")  # what scripts/test-deps.sh installs
CODEX_PREFIX = ROOT / ".cache" / "codex"
CODEX_BIN = CODEX_PREFIX / "node_modules" / ".bin" / "codex"
ANSWER = "Hello from fake."  # the fake upstream's streamed answer
RATE = {"error": {"message": "Rate limit reached for gpt-5-codex in organization org-fake on tokens per min (TPM).",
                  "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}  # fmt: skip
UNAVAILABLE = {"error": {"message": "The server is overloaded or not ready yet.", "type": "server_error",
                         "param": None, "code": None}}  # fmt: skip
PROVIDER_UNAVAILABLE_RETRIES = 5  # FAST_RETRIES
RATE_LIMIT_RETRIES = 3  # FAST_RETRIES
FEW_RETRIES = "request_max_retries = 1\nstream_max_retries = 1\n"


@pytest.fixture(scope="session")
def codex() -> Path:
    """The Codex CLI, installed once into .cache/codex (scripts/test-deps.sh does the same)."""
    if not CODEX_BIN.exists():
        try:
            done = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CODEX_PREFIX),
                 f"@openai/codex@{CODEX_VERSION}"],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            failure = None if done.returncode == 0 else (done.stderr or done.stdout)[-2000:]
        except (OSError, subprocess.TimeoutExpired) as e:
            failure = repr(e)
        if failure is not None or not CODEX_BIN.exists():
            msg = f"!!! CODEX CLI COULD NOT BE INSTALLED: the Codex e2e tests did NOT run !!!\n{failure}"
            warnings.warn(msg, stacklevel=1)
            pytest.skip(msg)
    return CODEX_BIN


def cut_stream() -> Stream:
    """Some visible text, then the connection drops."""
    return Stream([*responses_head(), *responses_deltas(("Hel", "lo", " wor"), start_seq=4)], then="drop")


@pytest.fixture(scope="module")
def gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    # A circuit that never opens here: every count below is the retry policy's alone.
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexgw"),
                    FAST_RETRIES + "circuit_breaker: {failure_threshold: 1000, open_s: 1}\n")  # fmt: skip
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def continuing_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """The same, in front of an upstream declared to continue like vLLM's Responses API."""
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexcont"), FAST_RETRIES,
                    upstream_yaml=", continuation: continue_final_message")  # fmt: skip
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def replaying_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """The same, in front of an upstream that cannot prefill but whose answers repeat."""
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexreplay"), FAST_RETRIES,
                    upstream_yaml=", continuation: replay_any")  # fmt: skip
    yield gw
    gw.stop()


@pytest.fixture
def up(upstream: FakeUpstream) -> FakeUpstream:
    return upstream


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float


@pytest.fixture
def run_codex(codex: Path, gateway: RunningGateway, tmp_path: Path):  # type: ignore[no-untyped-def]
    """`codex exec` as a user runs it headless, with a fresh CODEX_HOME pointing at the gateway."""

    def run(prompt: str = "say hi", provider_extra: str = "", timeout: float = 60,
            via: RunningGateway = gateway) -> Run:
        home = tmp_path / "home"
        codex_home = home / "codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            'model = "gpt-5-codex"\n'
            'model_provider = "gw"\n'
            'approval_policy = "never"\n'
            'sandbox_mode = "read-only"\n'
            "\n[model_providers.gw]\n"
            'name = "gw"\n'
            f'base_url = "{via.base}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "GW_KEY"\n'
            "requires_openai_auth = false\n" + provider_extra
        )
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "GW_KEY": "dummy"}
        t0 = time.monotonic()
        p = subprocess.run([str(codex), "exec", "--skip-git-repo-check", prompt], env=env, cwd=home,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)  # fmt: skip
        return Run(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)

    return run


def calls(up: FakeUpstream) -> int:
    return len(up.responses_requests())


def errors(run: Run) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]


def test_codex_answers_through_the_gateway(run_codex, up: FakeUpstream) -> None:
    r = run_codex("say hi")
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == ANSWER
    assert calls(up) == 1
    sent = up.responses_requests()[0]
    assert sent.headers["originator"] == "codex_exec" and sent.headers["Authorization"] == "Bearer dummy"
    body = sent.json()
    assert body["stream"] is True and body["store"] is False
    assert body["input"][-1]["content"] == [{"type": "input_text", "text": "say hi"}]


def test_503_twice_then_success(run_codex, up: FakeUpstream) -> None:
    up.script(Reply(503, UNAVAILABLE), Reply(503, UNAVAILABLE))
    r = run_codex()
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == ANSWER
    assert calls(up) == 3  # the gateway's retries; Codex saw one clean stream
    assert "Reconnecting" not in r.stderr


def test_permanent_503_reaches_the_provider_once_per_gateway_budget(run_codex, up: FakeUpstream) -> None:
    """Codex sends this turn up to 4 times (1 HTTP retry x 1 reconnect), each a JSON-identical
    body (CODEX_NOTES.md: reconnects reorder `client_metadata`). The gateway already spent
    its whole retry budget on the first; the repeats must not reach the provider again."""
    up.script(*[Reply(503, UNAVAILABLE)] * 100)
    r = run_codex(provider_extra=FEW_RETRIES)
    assert r.code != 0 and r.stdout.strip() == ""
    assert any("503" in line for line in errors(r)), r.stderr
    assert calls(up) == 1 + PROVIDER_UNAVAILABLE_RETRIES, f"{calls(up)} upstream calls for one Codex turn"
    assert r.seconds < 30


def test_429_reaches_the_provider_once_per_gateway_budget(run_codex, up: FakeUpstream) -> None:
    up.script(*[Reply(429, RATE)] * 100)
    r = run_codex(provider_extra=FEW_RETRIES)
    assert r.code != 0 and r.stdout.strip() == ""
    assert any("429" in line for line in errors(r)), r.stderr
    assert calls(up) == 1 + RATE_LIMIT_RETRIES, f"{calls(up)} upstream calls for one Codex turn"
    assert r.seconds < 30


def test_stream_cut_mid_answer_then_codex_reconnects(run_codex, up: FakeUpstream) -> None:
    up.script(cut_stream())
    r = run_codex()
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == ANSWER  # the cut attempt's partial text is not in the answer
    assert calls(up) == 2  # the gateway does not retry after text reached Codex; Codex does, once
    assert "Reconnecting... 1/" in r.stderr


def test_stream_cut_mid_answer_is_continued_without_codex_noticing(
    run_codex, up: FakeUpstream, continuing_gateway: RunningGateway
) -> None:
    def continuation(payload: dict[str, object]) -> Stream:
        last = payload["input"][-1]  # type: ignore[index]
        assert last == {"role": "assistant", "content": "Hello wor", "status": "in_progress"}, last
        return Stream(responses_continuation("ld.", ["l", "d."]), then="eof")

    up.script(cut_stream(), continuation)
    r = run_codex(via=continuing_gateway)
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == "Hello world."  # the shown part and the continuation, once each
    assert calls(up) == 2 and "Reconnecting" not in r.stderr  # Codex saw one unbroken stream


def test_stream_cut_mid_answer_is_finished_by_a_replay_without_codex_noticing(
    run_codex, up: FakeUpstream, replaying_gateway: RunningGateway
) -> None:
    # The replay's deltas split differently: the seam ("Hello wor") falls inside " world.".
    up.script(cut_stream(), Stream(responses_stream(words=("Hello", " world.")), then="eof"))
    r = run_codex(via=replaying_gateway)
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == "Hello world."  # the shown part once, then only what followed it
    first, second = up.responses_requests()
    assert first.json() == second.json()  # the same request again: nothing asked of the upstream
    assert "Reconnecting" not in r.stderr  # Codex saw one unbroken stream


def test_stream_cut_for_good_ends_with_the_gateways_typed_failure(run_codex, up: FakeUpstream) -> None:
    up.script(*[cut_stream() for _ in range(10)])
    r = run_codex(provider_extra=FEW_RETRIES)
    assert r.code != 0 and r.stdout.strip() == ""
    assert calls(up) == 2  # 1 + stream_max_retries: one upstream attempt per Codex attempt
    last = errors(r)[-1]
    assert last.startswith("ERROR: stream disconnected before completion:"), r.stderr
    # Codex read the gateway's response.failed, not a raw connection drop.
    assert "Transport error" not in last and "error decoding response body" not in last, last


def test_an_overflow_event_mid_stream_reads_as_an_overflow_to_codex(run_codex, up: FakeUpstream) -> None:
    """The gateway's response.failed keeps `context_length_exceeded`, outside openai-python's
    ResponseError codes, because Codex reads it there: it stops with its overflow message after
    one request instead of reconnecting."""
    case = next(c for c in IN_SAMPLE if c["name"] == "openai-responses-stream-failed-context-length-exceeded")
    failed = case["body"].replace('"sequence_number":2', '"sequence_number":7').encode()
    up.script(*[Stream([*responses_head(), *responses_deltas(("Hel", "lo", " wor"), start_seq=4), failed],
                       then="eof")] * 6)  # fmt: skip
    r = run_codex(provider_extra=FEW_RETRIES)
    assert r.code != 0 and calls(up) == 1
    assert any("ran out of room" in line for line in errors(r)), r.stderr


def test_context_overflow_reaches_codex_once(run_codex, up: FakeUpstream) -> None:
    """Default `compression.self_compacting_clients: pass_through`: Codex gets the provider's
    overflow. Codex does not retry it, and `codex exec` ends the turn (it compacts only
    before a turn, from reported usage; CODEX_NOTES.md)."""
    up.script(*[responses_overflow()] * 5)
    r = run_codex()
    assert r.code != 0
    assert calls(up) == 1
    assert any("context window" in line for line in errors(r)), r.stderr


@pytest.fixture(scope="module")
def no_websocket_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexnows"), server_yaml=", responses_websocket: false")
    yield gw
    gw.stop()


def run_built_in(codex: Path, gw: RunningGateway, home: Path, prompt: str, model: str = "gpt-5-codex") -> Run:
    """`codex exec` on Codex's own `openai` provider pointed at the gateway (`openai_base_url`),
    which opens the Responses API's WebSocket before any HTTP request."""
    codex_home = home / "codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\napproval_policy = "never"\nsandbox_mode = "read-only"\n'
        f'openai_base_url = "{gw.base}/v1"\n'
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "CODEX_API_KEY": "dummy"}
    t0 = time.monotonic()
    p = subprocess.run([str(codex), "exec", "--skip-git-repo-check", prompt], env=env, cwd=home,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)  # fmt: skip
    return Run(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)


def access_lines(gw: RunningGateway, before: int, count: int) -> list[dict]:
    """The first ``count`` request lines the gateway logged after its first ``before`` lines."""
    def lines(text: str) -> list[dict]:
        return [json.loads(line) for line in text.splitlines()[before:] if '"event":"request"' in line]

    return lines(gw.logs_when(lambda text: len(lines(text)) >= count))


def test_codex_on_its_built_in_provider_falls_back_from_websocket_at_once(
    codex: Path, no_websocket_gateway: RunningGateway, up: FakeUpstream, tmp_path: Path
) -> None:
    """With the mode off, the upgrade is answered 426. Forwarded, it was a plain GET upstream:
    404, 7 handshakes (~6.5 s) before HTTPS. On the 426: one handshake, then the turn over HTTPS."""
    gw = no_websocket_gateway
    before = len(gw.logs().splitlines())
    r = run_built_in(codex, gw, tmp_path / "home", "say hi")
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == ANSWER
    assert [q.method for q in up.requests] == ["POST"]  # no GET went upstream
    lines = access_lines(gw, before, 2)
    assert [(q["method"], q["path"], q["status"]) for q in lines] == [
        ("GET", "/v1/responses", 426), ("POST", "/v1/responses", 200)]
    assert r.seconds < 5, r.seconds


def test_codex_on_its_built_in_provider_runs_a_tool_loop_over_the_websocket(
    codex: Path, gateway: RunningGateway, up: FakeUpstream, tmp_path: Path
) -> None:
    """The mode itself: Codex opens the WebSocket and runs its turns on it, a shell call and the
    answer after its result, each one upstream POST. Codex sends a later turn on the connection as
    its new items with `previous_response_id` and `store: false`; the upstream gets it whole."""
    def model(payload: dict) -> Step | None:
        return tool_call.answer("responses", payload, "gpt-5-codex")[0]

    up.script(model, model)
    before = len(gateway.logs().splitlines())
    r = run_built_in(codex, gateway, tmp_path / "home", "list the files here")
    assert r.code == 0, r.stderr
    assert r.stdout.strip().startswith("The tool answered:") and "hello from a shell tool" in r.stdout
    assert [q.method for q in up.requests] == ["POST", "POST"]  # no GET upstream, no fallback
    first, second = (q.json() for q in up.responses_requests())
    assert first["stream"] is True and "previous_response_id" not in second and "type" not in second
    items = second["input"]
    assert items[: len(first["input"])] == first["input"]  # the first turn's input, then its output
    assert [i["type"] for i in items if i.get("type", "").startswith("function_call")] == [
        "function_call", "function_call_output"]
    # Codex warms the connection up first (`generate: false`), answered by the gateway alone.
    lines = access_lines(gateway, before, 3)
    assert [(q["method"], q["status"], q.get("transport"), q["attempts"]) for q in lines] == [
        ("POST", 200, "websocket", 0), ("POST", 200, "websocket", 1), ("POST", 200, "websocket", 1)]
    assert "Falling back" not in r.stderr and "Reconnecting" not in r.stderr


def test_codex_on_its_built_in_provider_reaches_a_rate_limited_provider_once_per_gateway_budget(
    codex: Path, gateway: RunningGateway, up: FakeUpstream, tmp_path: Path
) -> None:
    """Stock Codex on its built-in provider resends a turn over the WebSocket, each resend with a
    new `client_metadata["x-codex-ws-stream-request-start-ms"]`, then over HTTPS. Fingerprinted
    with it, no resend was known as a repeat: a permanent 429 reached the provider 33 times a turn
    (audit). Now the gateway's own attempts, once; every resend is answered from memory."""
    up.script(*[Reply(429, RATE, {"retry-after": "1"})] * 100)
    before = len(gateway.logs().splitlines())
    r = run_built_in(codex, gateway, tmp_path / "home", "say hi")
    assert r.code != 0 and r.stdout.strip() == ""
    lines = [json.loads(line) for line in gateway.logs().splitlines()[before:] if '"event":"request"' in line]
    refused = [(q.get("transport"), q["attempts"]) for q in lines if q["status"] == 429]
    # The first try spends the gateway's attempts; every resend after it is known as a repeat:
    # answered from memory within the 429's second, else one probe, as over HTTPS (each resend
    # over the WebSocket spent all the attempts again: 33 calls, 15 now).
    assert refused[0] == ("websocket", 1 + RATE_LIMIT_RETRIES), refused
    assert len(refused) > 2 and all(attempts <= 1 for _, attempts in refused[1:]), refused
    assert calls(up) < 25, f"{calls(up)} upstream calls for one Codex turn"


@pytest.fixture(scope="module")
def short_lived_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """Connections of the WebSocket mode served 0.5 s (OpenAI's: 60 minutes)."""
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexaged"), server_yaml=", responses_websocket_max_age_s: 0.5")
    yield gw
    gw.stop()


def test_codex_on_its_built_in_provider_opens_a_new_connection_at_the_connections_age(
    codex: Path, short_lived_gateway: RunningGateway, up: FakeUpstream, tmp_path: Path
) -> None:
    """The first answer takes past the connection's age: it is answered whole, then the connection
    gets `websocket_connection_limit_reached` and is closed 1001. Codex runs the tool and sends the
    next turn on a new connection, whole, as OpenAI's guide asks of a client at its 60 minutes."""
    def model(payload: dict) -> Step | None:
        step = tool_call.answer("responses", payload, "gpt-5-codex")[0]
        if isinstance(step, Stream) and not up.responses_requests()[:-1]:
            step.pause_s = 0.8  # the first call only: its turn runs past the 0.5 s (within idle_s)
        return step

    up.script(model, model)
    gw = short_lived_gateway
    before = len(gw.logs().splitlines())
    r = run_built_in(codex, gw, tmp_path / "home", "list the files here")
    assert r.code == 0, r.stderr
    # The tool's result came back (what it printed is the sandbox's: bwrap fails under some hosts).
    assert r.stdout.strip().startswith("The tool answered:"), r.stdout
    assert [q.method for q in up.requests] == ["POST", "POST"]  # the first turn was not cut, nor sent twice
    first, second = (q.json() for q in up.responses_requests())
    assert second["input"][: len(first["input"])] == first["input"] and "previous_response_id" not in second
    logged = [json.loads(line) for line in gw.logs().splitlines()[before:] if line.startswith("{")]
    closes = [q for q in logged if q.get("event") == "websocket_closed"]
    # Ended after its two frames (Codex's warm-up, the first turn), none cut or refused; the
    # second turn on a new connection.
    assert [(q["reason"], q["code"], q["frames"]) for q in closes][:1] == [("max_age", 1001, 2)], closes
    turns = [(q.get("transport"), q["status"], q["attempts"]) for q in logged if q.get("event") == "request"]
    assert turns == [("websocket", 200, 0), ("websocket", 200, 1), ("websocket", 200, 1)], turns
    assert "Reconnecting" not in r.stderr, r.stderr
