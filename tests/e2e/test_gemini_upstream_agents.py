"""The real agents and SDKs on a Gemini API upstream (``apis: [gemini]``), as a user runs them:
the fake upstream (``python -m gateway.fake``, speaking Gemini at its root) and the gateway
(``python -m gateway --config``) are real processes, and every client keeps its stock settings.

- Claude Code (``claude -p``: Messages → chat → Gemini) and Codex (``codex exec``: Responses →
  chat → Gemini): a plain answer, and the fake's ``tool`` scenario (a model name ending
  ``-tool``), a shell tool loop whose call must come back with its id and its
  ``thoughtSignature`` (the fake refuses a replayed call of its own without one, as Gemini 3 does).
- Gemini CLI (``gemini -p``, stock model "auto", only the auth settings a base URL needs):
  passed through, a plain answer and a ``list_directory`` loop; the fake's log shows each body
  arrived with the fields the CLI sends and the key in ``x-goog-api-key``.
- The google-genai SDK (its own interpreter, as tests/e2e/test_google_genai.py) and the openai
  SDK: buffered, streamed, a function call, countTokens, a 429 with RetryInfo that the gateway
  waits out and retries.

What reached the upstream is read from the fake's log lines (gateway/fake/scenarios.py):
``gemini key=K model=M scenario=S -> WHAT [sent: FIELDS; key in PLACES]``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.fake.keyed import _mask
from tests.e2e.conftest import ROOT, RunningGateway, base_env, free_port, start
from tests.e2e.test_claude_code import claude_bin, run_claude  # noqa: F401 (a fixture)
from tests.e2e.test_codex import codex  # noqa: F401 (a fixture)
from tests.e2e.test_gemini_cli import gemini  # noqa: F401 (a fixture)
from tests.e2e.test_google_genai import genai_python  # noqa: F401 (a fixture)
from tests.procs import RunningProcess

pytestmark = pytest.mark.e2e

KEY = "AIza-fake-upstream-key"
# Each client's model onto Gemini's; a name ending -tool keeps the fake's tool scenario.
MODEL_MAP = ("{'claude-*-tool': gemini-2.5-flash-tool, 'claude-*': gemini-2.5-flash, "
             "'gpt-*-tool': gemini-2.5-flash-tool, 'gpt-*': gemini-2.5-flash}")  # fmt: skip
# The fields of Gemini CLI 0.61's request, in its order (tests/corpus/requests/gemini-cli-0.61-first.json).
CLI_FIELDS = list(json.loads((ROOT / "tests/corpus/requests/gemini-cli-0.61-first.json").read_text())["body"])
_LINE = re.compile(r"^fake: gemini key=(\S+) model=(\S+) scenario=(\S+) -> (.*) \[sent: (.*); key in (.*)\]$", re.M)


@dataclass
class Seen:
    """One request the fake answered on the Gemini API, as its log line tells it."""

    key: str
    model: str
    what: str
    fields: list[str]
    key_in: str


@dataclass
class Setup:
    fake: RunningProcess
    gw: RunningGateway
    tool_gw: RunningGateway  # every gemini-* model mapped to the tool scenario (Gemini CLI's "auto" names them)
    fake_port: int

    def mark(self) -> tuple[int, int, int]:
        return len(self.fake.logs()), len(self.gw.logs().splitlines()), len(self.tool_gw.logs().splitlines())

    def seen(self, since: tuple[int, int, int]) -> list[Seen]:
        return [Seen(k, m, w, [f.split("[")[0] for f in fields.split()], at)
                for k, m, _, w, fields, at in _LINE.findall(self.fake.logs()[since[0]:])]  # fmt: skip


def _gateway(tmp: Path, fake_port: int, model_map: str) -> RunningGateway:
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 2}}\n"
        f"upstreams: [{{name: google, base_url: 'http://127.0.0.1:{fake_port}/v1beta', apis: [gemini], "
        f"api_key: {KEY}, model_map: {model_map}}}]\n"
        "timeouts: {connect_s: 2, first_byte_s: 20, idle_s: 20}\n"
    )
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("geminiup")
    port = free_port()
    fake = start([sys.executable, "-m", "gateway.fake", "--port", str(port), "--wait-s", "1"], base_env(), port,
                 tmp / "fake.log", ready_path="/v1/models")  # fmt: skip
    try:
        (tmp / "a").mkdir()
        (tmp / "b").mkdir()
        gw = _gateway(tmp / "a", port, MODEL_MAP)
        tool_gw = _gateway(tmp / "b", port, "{'gemini-*': gemini-2.5-flash-tool}")
        yield Setup(fake, gw, tool_gw, port)
        tool_gw.stop()
        gw.stop()
    finally:
        fake.stop()


def access(gw: RunningGateway, since: int, part: str) -> list[dict[str, Any]]:
    """The model calls (Claude Code also sends a HEAD / first) on paths that hold ``part``, logged
    after line ``since``: a line is written after its answer, so the test before's last one
    may land after this test's mark; its path tells it apart."""
    def ours(text: str) -> list[dict[str, Any]]:
        out = []
        for line in text.splitlines()[since:]:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if (isinstance(doc, dict) and doc.get("event") == "request" and doc.get("method") == "POST"
                    and part in str(doc.get("path", ""))):  # fmt: skip
                out.append(doc)
        return out

    gw.logs_when(lambda t: bool(ours(t)))
    return ours(gw.logs())


def assert_all_in_header(seen: list[Seen]) -> None:
    # (The fake's log masks a key it was not given by name, as OpenAI masks one: gateway/fake/keyed.py.)
    assert seen and all((s.key, s.key_in) == (_mask(KEY), "x-goog-api-key") for s in seen), seen


def assert_a_tool_round_trip(seen: list[Seen], tool: str, result: str) -> None:
    """One call of ``tool`` by the fake, its result back to that call's id (the replayed call
    signed: an unsigned one is refused and logged as such, which would end the run here)."""
    calls = [s.what.split()[-1] for s in seen if s.what.startswith(f"tool call {tool} ")]
    answers = [s.what for s in seen if s.what.startswith("answer (tool result came back")]
    assert len(calls) == 1 and len(answers) == 1, [s.what for s in seen]
    assert result in answers[0] and answers[0].endswith(f" to call {calls[0]}"), (answers, calls)


# --- Claude Code: Messages → chat → Gemini ---------------------------------------------------


def test_claude_code_answers_on_a_gemini_upstream(claude_bin: Path, setup: Setup, tmp_path: Path) -> None:  # noqa: F811
    since = setup.mark()
    r = run_claude(claude_bin, setup.gw, tmp_path, "say hi", timeout=90)
    assert r.rc == 0, (r.out, r.err[-2000:])
    assert "Hello from fake." in r.out
    seen = setup.seen(since)
    assert_all_in_header(seen)
    assert [s.model for s in seen] == ["gemini-2.5-flash"] and seen[0].what == "answer"
    assert seen[0].fields == ["contents", "systemInstruction", "tools", "generationConfig"], seen
    [line] = access(setup.gw, since[1], "/v1/messages")
    assert (line["path"], line["translated"], line["attempts"]) == ("/v1/messages", "messages->gemini", 1)
    print(f"claude code plain: {len(seen)} call(s), {r.seconds:.1f} s")


def test_claude_code_runs_a_bash_tool_loop_on_a_gemini_upstream(
    claude_bin: Path, setup: Setup, tmp_path: Path  # noqa: F811
) -> None:
    since = setup.mark()
    r = run_claude(claude_bin, setup.gw, tmp_path, "run a command", timeout=90,
                   ANTHROPIC_MODEL="claude-sonnet-4-5-tool")  # fmt: skip
    assert r.rc == 0, (r.out, r.err[-2000:])
    assert "The tool answered: hello from a shell tool" in r.out  # Claude Code ran the Bash call
    seen = setup.seen(since)
    assert_all_in_header(seen)
    # The result starts with the command's output (2.1.332 appends a `<system-reminder>` of the
    # tokens left to it).
    assert_a_tool_round_trip(seen, "Bash", "'hello from a shell tool")
    assert "refused" not in setup.fake.logs()[since[0]:]
    print(f"claude code tool loop: {len(seen)} calls, {r.seconds:.1f} s")


# --- Codex: Responses → chat → Gemini --------------------------------------------------------


def run_codex(codex_bin: Path, gw: RunningGateway, home: Path, model: str, prompt: str,
              *options: str) -> tuple[subprocess.CompletedProcess[str], float]:  # fmt: skip
    """``codex exec`` at its stock retry settings, pointed at the gateway by a provider entry."""
    codex_home = home / "codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "gw"\napproval_policy = "never"\nsandbox_mode = "read-only"\n'
        f'[model_providers.gw]\nname = "gw"\nbase_url = "{gw.base}/v1"\nwire_api = "responses"\n'
        'env_key = "GW_KEY"\nrequires_openai_auth = false\n'
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "GW_KEY": "dummy"}
    t0 = time.monotonic()
    done = subprocess.run([str(codex_bin), "exec", "--skip-git-repo-check", *options, prompt], env=env, cwd=home,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip
    return done, time.monotonic() - t0


def test_codex_answers_on_a_gemini_upstream(codex: Path, setup: Setup, tmp_path: Path) -> None:  # noqa: F811
    since = setup.mark()
    done, seconds = run_codex(codex, setup.gw, tmp_path, "gpt-5-codex", "say hi")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Hello from fake."
    seen = setup.seen(since)
    assert_all_in_header(seen)
    assert [s.model for s in seen] == ["gemini-2.5-flash"] and seen[0].what == "answer"
    # Its instructions, tools and tool_choice "auto", in Gemini's names (no sampling settings sent).
    assert seen[0].fields == ["contents", "systemInstruction", "tools", "toolConfig"], seen
    [line] = access(setup.gw, since[1], "/v1/responses")
    assert (line["path"], line["translated"], line["attempts"]) == ("/v1/responses", "responses->gemini", 1)
    print(f"codex plain: {len(seen)} call(s), {seconds:.1f} s")


def test_codex_runs_a_shell_tool_loop_on_a_gemini_upstream(codex: Path, setup: Setup, tmp_path: Path) -> None:  # noqa: F811
    since = setup.mark()
    done, seconds = run_codex(codex, setup.gw, tmp_path, "gpt-5-codex-tool", "run a command")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "The tool answered:" in done.stdout and "hello from a shell tool" in done.stdout
    seen = setup.seen(since)
    assert_all_in_header(seen)
    assert "Process exited with code 0" in done.stdout  # Codex really ran it
    assert_a_tool_round_trip(seen, "exec_command", "'Chunk ID: ")
    assert "refused" not in setup.fake.logs()[since[0]:]
    print(f"codex tool loop: {len(seen)} calls, {seconds:.1f} s")


def test_codex_with_an_output_schema_answers_on_gemini_2_5(codex: Path, setup: Setup, tmp_path: Path) -> None:  # noqa: F811
    """``--output-schema`` beside Codex's tools: Gemini 2.5 refuses JSON mode with functions
    ("Function calling with a response mime type: 'application/json' is unsupported"), so the
    schema goes as an instruction and the tools stay."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"answer": {"type": "string"}},
                                  "required": ["answer"], "additionalProperties": False}))  # fmt: skip
    since = setup.mark()
    done, seconds = run_codex(codex, setup.gw, tmp_path, "gpt-5-codex", "say hi", "--output-schema", str(schema))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Hello from fake."
    seen = setup.seen(since)
    assert [s.what for s in seen] == ["answer"] and "generationConfig" not in seen[0].fields, seen
    assert "refused" not in setup.fake.logs()[since[0]:]
    print(f"codex --output-schema: {len(seen)} call(s), {seconds:.1f} s")


# --- Gemini CLI: passed through --------------------------------------------------------------


def run_gemini_cli(gemini_bin: Path, gw: RunningGateway, tmp: Path, prompt: str,
                   model: str | None = None) -> tuple[subprocess.CompletedProcess[str], float]:  # fmt: skip
    """``gemini -p`` with its stock model ("auto", unless ``model``) and settings but the auth
    docs/agents/gemini-cli.md gives."""
    home, work = tmp / "home", tmp / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (work / "notes.txt").write_text("hello\n")
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "GEMINI_CLI_HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": gw.base, "GEMINI_API_KEY": "dummy",
        "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1", "CI": "1",
    }  # fmt: skip
    t0 = time.monotonic()
    chosen = ["-m", model] if model else []
    done = subprocess.run([str(gemini_bin), "-p", prompt, *chosen, "--output-format", "text"], env=env, cwd=work,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)  # fmt: skip
    return done, time.monotonic() - t0


def test_gemini_cli_is_passed_through_to_a_gemini_upstream(gemini: Path, setup: Setup, tmp_path: Path) -> None:  # noqa: F811
    since = setup.mark()
    done, seconds = run_gemini_cli(gemini, setup.gw, tmp_path, "say hi")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Hello from fake." in done.stdout
    seen = setup.seen(since)
    assert_all_in_header(seen)  # the CLI's dummy key replaced by the upstream's, in the header
    # "auto": the routing call (buffered, JSON asked for, no tools), then the answer with the
    # CLI's fields as it sends them: nothing added (the fake refuses an unknown field), none dropped.
    routing, answer = seen
    assert "flash-lite" in routing.model and routing.fields == ["contents", "systemInstruction", "generationConfig"]
    assert answer.fields == CLI_FIELDS, (answer.fields, CLI_FIELDS)
    lines = access(setup.gw, since[1], "/models/")
    assert [(a["path"].rsplit(":", 1)[-1], a["status"], a["attempts"], "translated" in a) for a in lines] == [
        ("generateContent", 200, 1, False), ("streamGenerateContent", 200, 1, False)]  # fmt: skip
    print(f"gemini cli plain: {len(seen)} calls, {seconds:.1f} s")


def test_gemini_cli_retries_a_gemini_stream_cut_mid_answer_and_gets_the_whole_answer(
    gemini: Path, setup: Setup, tmp_path: Path  # noqa: F811
) -> None:
    """The fake's ``cut`` scenario: its first words, then the connection closed, and a whole
    answer to the next call. The gateway ends the cut stream with its error event and the bare
    JSON error apart; the SDK inside the CLI raises on the bare one (503, retryable), the CLI
    retries mid-stream and prints the part, then the whole answer, exit 0. (A stream broken on
    every try: tests/e2e/test_gemini_cli.py, exit 1.)"""
    (tmp_path / "gw").mkdir()
    gw = _gateway(tmp_path / "gw", setup.fake_port, "{'gemini-2.5-flash': gemini-2.5-flash-cut}")
    try:
        since = setup.mark()
        done, seconds = run_gemini_cli(gemini, gw, tmp_path, "Tell a story", model="gemini-2.5-flash")
    finally:
        gw.stop()
    assert done.returncode == 0, (done.stdout, done.stderr[-3000:])
    assert done.stdout.replace("\n", "").endswith("Hello from fake."), done.stdout
    assert [s.what for s in setup.seen(since)] == ["stream, then drop", "answer"], setup.seen(since)
    print(f"gemini cli, a stream cut once: {len(setup.seen(since))} calls, {seconds:.1f} s")


def test_gemini_cli_runs_a_function_call_loop_on_a_gemini_upstream(
    gemini: Path, setup: Setup, tmp_path: Path  # noqa: F811
) -> None:
    since = setup.mark()
    done, seconds = run_gemini_cli(gemini, setup.tool_gw, tmp_path, "list the files here")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "The tool answered: Directory listing for" in done.stdout and "notes.txt" in done.stdout
    seen = setup.seen(since)
    assert_all_in_header(seen)
    assert_a_tool_round_trip(seen, "list_directory", "'Directory listing for ")  # id and signature kept
    assert all(s.fields == CLI_FIELDS for s in seen if s.what != "answer (no tool declared)"), seen
    assert "refused" not in setup.fake.logs()[since[0]:]
    print(f"gemini cli tool loop: {len(seen)} calls, {seconds:.1f} s")


# --- The SDKs ----------------------------------------------------------------------------------

DRIVER = Path(__file__).with_name("genai_driver.py")


def drive(python: Path, gw: RunningGateway, scenario: str, *model: str) -> dict[str, Any]:
    done = subprocess.run([str(python), str(DRIVER), gw.base, scenario, *model], capture_output=True, text=True,
                          timeout=120, env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_genai_sdk_buffered_streamed_and_counted_on_a_gemini_upstream(
    genai_python: Path, setup: Setup  # noqa: F811
) -> None:
    since = setup.mark()
    out = drive(genai_python, setup.gw, "listed")
    assert out["text"] == "Hello from the fake upstream." and out["finish"] == "STOP"
    assert out["models"] == ["models/gemini-2.5-flash"]  # Google's own list, read (it was [])
    assert out["usage"]["total_token_count"] == out["usage"]["prompt_token_count"] + out["usage"]["candidates_token_count"]
    assert "".join(t or "" for t in out["stream"]) == "Hello from fake."
    assert out["count"] > 0
    seen = setup.seen(since)  # countTokens is answered without a scenario line
    assert_all_in_header(seen)
    assert [s.fields for s in seen] == [["contents", "systemInstruction", "generationConfig"], ["contents"]]
    paths = [a["path"] for a in access(setup.gw, since[1], "/models/")]
    assert [p.rsplit(":", 1)[-1] for p in paths] == ["generateContent", "streamGenerateContent", "countTokens"]


def test_genai_sdk_function_call_round_trip_keeps_the_id_and_signature(
    genai_python: Path, setup: Setup  # noqa: F811
) -> None:
    since = setup.mark()
    out = drive(genai_python, setup.gw, "tools", "gemini-2.5-flash-tool")
    assert out["call"]["name"] == "get_weather" and out["call"]["id"].startswith("fc_") and out["call"]["signed"]
    assert out["text"] == "The tool answered: sunny, 21C"
    seen = setup.seen(since)
    assert_a_tool_round_trip(seen, "get_weather", "'sunny, 21C'")
    assert f"tool call get_weather {out['call']['id']}" == seen[0].what


def test_genai_sdk_gets_the_answer_after_the_gateway_waits_out_a_429(
    genai_python: Path, setup: Setup  # noqa: F811
) -> None:
    since = setup.mark()
    out = drive(genai_python, setup.gw, "timed", "gemini-2.5-flash-429")
    assert out["text"] == "Hello from the fake upstream."
    assert [s.what for s in setup.seen(since)] == ["429 (retryDelay: 1s)", "answer"]
    [line] = access(setup.gw, since[1], "/models/")
    assert (line["status"], line["attempts"], line["retries"]) == (200, 2, 1)
    assert out["seconds"] >= 0.9  # the RetryInfo wait was kept
    print(f"genai 429: {out['seconds']:.2f} s, 2 upstream calls")


def test_openai_sdk_chat_buffered_and_streamed_on_a_gemini_upstream(setup: Setup) -> None:
    since = setup.mark()
    client = openai.OpenAI(base_url=setup.gw.base + "/v1", api_key="sk-client")  # stock settings
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "say hi"}])  # fmt: skip
        done = raw.parse()
        assert raw.headers["x-llm-translated"] == "chat->gemini"
        assert done.choices[0].message.content == "Hello from the fake upstream."
        assert done.choices[0].finish_reason == "stop" and done.usage is not None and done.usage.total_tokens > 0
        text, finishes = "", []
        for chunk in client.chat.completions.create(model="gpt-4o-mini", stream=True, messages=[
                {"role": "user", "content": f"say hi {uuid.uuid4().hex[:4]}"}]):  # fmt: skip
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finishes.append(choice.finish_reason)
        assert text == "Hello from fake." and [f for f in finishes if f] == ["stop"]
    finally:
        client.close()
    seen = setup.seen(since)
    assert_all_in_header(seen)
    assert [s.fields for s in seen] == [["contents", "systemInstruction"], ["contents"]]
