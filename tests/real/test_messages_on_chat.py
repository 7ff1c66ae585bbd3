"""Anthropic Messages clients on the real chat-only server: the anthropic SDK and Claude Code
itself (`claude -p --bare`) through the gateway, with `apis: [chat]` on the upstream so every
request goes through the Messages → chat translator. Nothing is mocked.

Claude Code's `--bare` request (~1.8k tokens of system prompt and tools) does not fit the
suite's 1,024-token server, so it gets its own server with a 4,096-token window (SmolLM2 was
trained on 8k; the answer's quality is not the point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from tests.procs import ROOT, RunningProcess, base_env, free_port, start
from tests.real.conftest import MODEL, N_CTX, Proc, start_llama

CLAUDE = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
BIG_CTX = 4096


def _chat_gateway(server: Proc, n_ctx: int, tmp: Path) -> RunningProcess:
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(json.dumps({
        "server": {"port": port, "drain_s": 5},
        "upstreams": [{"name": "llama", "base_url": server.base + "/v1", "context_window": n_ctx,
                       "apis": ["chat"], "model_map": {"*": MODEL}}],
        "timeouts": {"connect_s": 5, "first_byte_s": 300, "idle_s": 120},
    }))  # fmt: skip
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log",
                 timeout_s=60)  # fmt: skip


@pytest.fixture(scope="module")
def messages_gateway(llama_server: Proc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProcess]:
    gw = _chat_gateway(llama_server, N_CTX, tmp_path_factory.mktemp("msgchat"))
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def sdk(messages_gateway: RunningProcess) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(api_key="dummy", base_url=messages_gateway.base, max_retries=0, timeout=300)
    yield c
    c.close()


PROMPT = [{"role": "user", "content": "Name three colours."}]


def test_anthropic_sdk_create_gets_a_valid_message(sdk: anthropic.Anthropic) -> None:
    m = sdk.messages.create(model="claude-opus-4-8", max_tokens=16, system="You are brief.", messages=PROMPT,
                            extra_body={"temperature": 0})  # fmt: skip
    assert m.type == "message" and m.model == "claude-opus-4-8" and m.id.startswith("msg_")
    assert m.content and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 16  # the server's own counts


def test_anthropic_sdk_stream_reads_back_whole(sdk: anthropic.Anthropic) -> None:
    seen: list[str] = []
    with sdk.messages.stream(model="claude-opus-4-8", max_tokens=16, messages=PROMPT,
                             extra_body={"temperature": 0}) as stream:  # fmt: skip
        for event in stream:
            seen.append(event.type)
        m = stream.get_final_message()
    assert seen[0] == "message_start" and "content_block_delta" in seen and seen[-1] == "message_stop"
    assert m.content[0].type == "text" and m.content[0].text and m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 0  # estimated: llama-cpp-python 0.3.36 sends no usage chunk


@pytest.fixture(scope="module")
def big_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProcess]:
    tmp = tmp_path_factory.mktemp("llama4k")
    server = start_llama(BIG_CTX, tmp)
    gw = _chat_gateway(server, BIG_CTX, tmp)
    yield gw
    gw.stop()
    server.stop()


@pytest.mark.timeout(600)  # a small model on a loaded 2-core host: the suite's 120 s is not enough
def test_claude_code_bare_answers_through_the_translation(big_gateway: RunningProcess, tmp_path: Path) -> None:
    if not os.access(CLAUDE, os.X_OK):
        pytest.fail(f"{CLAUDE} is missing: `make test` installs Claude Code (scripts/test-deps.sh)", pytrace=False)
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANTHROPIC_AUTH_TOKEN": "dummy",
           "ANTHROPIC_BASE_URL": big_gateway.base, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "CLAUDE_CODE_MAX_RETRIES": "0", "API_TIMEOUT_MS": "600000"}  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run([str(CLAUDE), "-p", "--bare", "say hi"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip(), (r.returncode, r.stdout[-800:], r.stderr[-800:],
                                                   f"{time.monotonic() - t0:.0f}s", big_gateway.logs()[-2000:])  # fmt: skip
    assert '"translated":"messages->chat"' in big_gateway.logs_when(lambda log: "messages->chat" in log)
