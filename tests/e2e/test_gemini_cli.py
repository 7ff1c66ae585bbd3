"""Gemini CLI itself (``gemini -p``, headless) on a chat-completions-only upstream, through the
gateway's Gemini → chat translation: a plain answer, and a function-call loop with a real
tool (``list_directory``) whose result goes back with the call's id.

Set up as docs/agents/gemini-cli.md says: ``GOOGLE_GEMINI_BASE_URL`` at the gateway,
``GEMINI_API_KEY``, a settings.json selecting ``gemini-api-key`` auth, the workspace trusted,
and ``-m`` naming the model (no routing call first). The CLI comes from
``.cache/gemini-cli`` (scripts/test-deps.sh) or ``GEMINI_CLI_BIN``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, RunningGateway, base_env, free_port, launch_cli, start
from tests.e2e.test_codex_chat import call, text
from tests.fakeupstream import FakeUpstream, Reply, Stream, chunk

pytestmark = pytest.mark.e2e

GEMINI_BIN = Path(os.environ.get("GEMINI_CLI_BIN") or ROOT / ".cache" / "gemini-cli" / "node_modules" / ".bin" / "gemini")
MODEL = "gemini-2.5-flash"


@pytest.fixture(scope="module")
def gemini() -> Path:
    if not GEMINI_BIN.exists():
        pytest.skip(f"Gemini CLI is not installed at {GEMINI_BIN} (scripts/test-deps.sh installs it)")
    return GEMINI_BIN


@pytest.fixture(scope="module")
def gemini_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("geminichat"), "",
                    upstream_yaml=", apis: [chat], model_map: {'gemini-*': qwen}")  # fmt: skip
    yield gw
    gw.stop()


def run_gemini(gemini: Path, gw: RunningGateway, tmp: Path, prompt: str,
               model: str | None = MODEL, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    """``gemini -p``; ``model`` None: the stock "auto", a routing call before each answer."""
    home, work = tmp / "home", tmp / "work"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("hello\n")
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "GEMINI_CLI_HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": gw.base, "GEMINI_API_KEY": "dummy",
        "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1", "CI": "1",
    }  # fmt: skip
    chosen = ["-m", model] if model else []
    return subprocess.run([str(gemini), "-p", prompt, *chosen, "--output-format", "text"], env=env, cwd=work,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)  # fmt: skip


def sent(up: FakeUpstream) -> list[dict[str, Any]]:
    assert all(r.path == "/v1/chat/completions" for r in up.requests), [r.path for r in up.requests]
    return [r.json() for r in up.requests]


def test_gemini_cli_answers_through_a_chat_upstream(
    gemini: Path, gemini_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.script(text(("Hi", " from", " qwen.")))
    done = run_gemini(gemini, gemini_gateway, tmp_path, "say hi")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Hi from qwen." in done.stdout
    [chat] = sent(upstream)
    assert chat["model"] == "qwen" and chat["stream"] is True
    assert chat["messages"][0]["role"] == "system" and chat["messages"][-1]["content"].endswith("say hi")
    assert {t["function"]["name"] for t in chat["tools"]} >= {"list_directory", "read_file"}


def test_gemini_cli_runs_a_function_call_loop_with_the_ids_kept(
    gemini: Path, gemini_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    upstream.script(call("call_ls1", "list_directory", json.dumps({"dir_path": str(work)})),
                    text(("There", " is", " notes.txt.")))  # fmt: skip
    done = run_gemini(gemini, gemini_gateway, tmp_path, "List the files here, then say what you found")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "There is notes.txt." in done.stdout
    first, second = sent(upstream)
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_ls1" == tool["tool_call_id"]
    assert assistant["tool_calls"][0]["function"]["name"] == "list_directory"
    assert "notes.txt" in tool["content"]


def test_gemini_cli_reports_a_spent_budget_without_retrying(
    gemini: Path, gemini_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A provider's exhausted credit (a 402 in Google's envelope, RESOURCE_EXHAUSTED) ends the
    run at once with the provider's words: the CLI does not retry it as it would a 429."""
    error = {"error": {"message": "Insufficient credits: add more to continue", "type": "billing",
                       "code": "insufficient_quota"}}  # fmt: skip
    upstream.script(*[Reply(402, error)] * 5)
    done = run_gemini(gemini, gemini_gateway, tmp_path, "say hi")
    assert done.returncode != 0
    assert "Insufficient credits" in done.stdout + done.stderr
    assert len(upstream.requests) == 1


BROKEN = ("Once", " upon", " a")


def broken() -> Stream:
    """A chat stream cut after some text: the gateway ends the client's stream with Google's
    typed error event, UNAVAILABLE (docs/streaming.md)."""
    return Stream([chunk({"role": "assistant", "content": ""}), *[chunk({"content": w}) for w in BROKEN]], then="drop")


def test_headless_a_stream_broken_mid_answer_prints_the_part_then_the_whole_retried_answer(
    gemini: Path, gemini_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Gemini CLI retries the request after the error event and, with ``-p``, prints what it
    had already printed and then the whole second answer, exit 0: the text shows twice."""
    upstream.script(broken(), text(("Once", " upon", " a", " time.")))
    done = run_gemini(gemini, gemini_gateway, tmp_path, "Tell a story")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Once upon aOnce upon a time." in done.stdout.replace("\n", ""), done.stdout
    assert len(upstream.requests) == 2


def test_headless_a_stream_broken_on_every_try_exits_1_with_the_gateways_error(
    gemini: Path, gemini_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The SDK inside the CLI raises on the bare JSON error the gateway writes apart after the
    event (it parses the event as an empty answer): the CLI retries it mid-stream three times,
    then exits 1 with the gateway's words, where it used to exit 0 with the part four times."""
    upstream.script(*[broken() for _ in range(5)])
    done = run_gemini(gemini, gemini_gateway, tmp_path, "Tell a story")
    assert done.returncode == 1, (done.stdout, done.stderr[-3000:])
    assert "got status: UNAVAILABLE" in done.stderr and "the upstream stream ended before" in done.stderr
    assert len(upstream.requests) == 4


def test_headless_a_broken_stream_continued_by_the_gateway_prints_one_answer(
    gemini: Path, fake: FakeUpstream, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """With ``continuation`` declared on the upstream (``prefix``: DeepSeek's and Mistral's
    chat form) the gateway continues the answer itself and the CLI sees one whole stream."""
    (tmp_path / "gw").mkdir()
    gw = launch_cli(fake, tmp_path / "gw", "", upstream_yaml=", apis: [chat], model_map: {'gemini-*': qwen}, "
                                                            "continuation: prefix")  # fmt: skip
    try:
        upstream.script(broken(), text((" time.",)))
        done = run_gemini(gemini, gw, tmp_path, "Tell a story")
    finally:
        gw.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Once upon a time.", done.stdout
    continued = sent(upstream)[1]["messages"][-1]
    assert continued == {"role": "assistant", "content": "Once upon a", "prefix": True}


@pytest.mark.timeout(240)
def test_a_stream_whose_first_words_come_after_60_s_is_answered(
    gemini: Path, fake: FakeUpstream, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """An upstream that begins its stream at once and shows its first words after 62 s (a long
    prompt's prefill, a model thinking silently), with the stock timeouts: the CLI waits 60 s
    for a head, then 300 s between body reads. The gateway sends the head at 57 s and waits on.
    Before, the CLI got a 504 at 57 s, then 504s from memory and 57 s probes, never an answer
    (the same CLI pointed at a Gemini API fake that waits so printed the answer at 77 s)."""
    (tmp_path / "gw").mkdir()
    port = free_port()
    config = tmp_path / "gw" / "gateway.yaml"
    config.write_text(f"server: {{port: {port}}}\n"
                      f"upstreams: [{{name: primary, base_url: '{fake.url}', apis: [chat]}}]\n")  # fmt: skip
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port,
               tmp_path / "gw" / "gateway.log")  # fmt: skip
    try:
        upstream.script(Stream([chunk({"role": "assistant", "content": "Slow"}), chunk({"content": " answer."}),
                                chunk({}, "stop")], pause_s=62, pause_after=0))  # fmt: skip
        done = run_gemini(gemini, gw, tmp_path, "say hi", timeout_s=200)
    finally:
        gw.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Slow answer."
    assert len(upstream.requests) == 1
