"""The access log's User-Agent: ordinary clients stay readable, anything key-like is masked."""

import pytest

from gateway.pipeline.observe import user_agent_of


@pytest.mark.parametrize(
    "agent",
    [
        # Measured: the AI SDK (ai 6.0.326 + @ai-sdk/openai-compatible 2.0.92) on node 20.
        "ai/6.0.326 ai-sdk/provider-utils/4.0.65 runtime/node.js/v20.20.2",
        # ai 7.0.173 + @ai-sdk/openai-compatible 3.0.92, node 20 (tests/e2e/test_vercel_ai_sdk.py).
        "ai/7.0.173 ai-sdk-provider-utils/5.0.81 node.js/v20.20.2",
        # Captured from opencode 1.18.33 and the AI SDK's compatible package alone (main's
        # tests/corpus/requests/chat-opencode-agent-step1.json, chat-ai-sdk-tool-loop-step1.json).
        "opencode/1.18.33 ai-sdk/provider-utils/4.0.23 runtime/bun/1.3.14",
        "ai-sdk/openai-compatible/2.0.92 ai-sdk/provider-utils/4.0.65 runtime/node.js/v20.20.2",
        # Versions with a pre-release part stay whole.
        "opencode/0.0.0-dev-202511250012 ai-sdk/openai-compatible/1.0.27 ai-sdk/provider-utils/3.0.17 runtime/bun/1.3.2",
        "claude-cli/2.1.197 (external, sdk-cli)",
        "codex_exec/0.169.0 (Debian 12.0.0; x86_64) xterm-256color (codex_exec; 0.169.0)",
        "AsyncOpenAI/Python 2.54.0",
        "curl/8.5.0",
        "task-runner/1.0",
        # Gemini CLI 0.61.0 names its model after its version (measured: it was logged masked).
        "GeminiCLI/0.61.0/gemini-2.5-flash (linux; x64; terminal)",
    ],
)
def test_ordinary_clients_are_logged_as_they_are(agent: str) -> None:
    assert user_agent_of(agent) == agent


@pytest.mark.parametrize(
    ("agent", "logged"),
    [
        ("my-agent/1.0 (Bearer sk-client-SECRET2; key=AKIAIOSFODNN7SECRETSECRET)", "my-agent/1.0 ([redacted] [redacted])"),
        ("agent/1.0 sk-proj-abcdef", "agent/1.0 [redacted]"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[redacted]"),
        ("app/1.0.0 token/0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d", "app/1.0.0 [redacted]"),
        # A key dressed as a version: too long a part, too many parts, or a key prefix.
        ("tool/1.0-AKIAIOSFODNN7SECRETSECRET", "[redacted]"),
        ("tool/1.0-550e8400-e29b-41d4-a716-446655440000", "[redacted]"),
        ("tool/1.0.0-sk-abcdef", "tool/1.0.0-[redacted]"),
        ("tool/1.0.0-sk-abcdefghijklmnopqrstu", "[redacted]"),
        ("x api_key=abc", "x [redacted]"),
        ("tool/1.0.0/AKIAIOSFODNN7SECRETSECRETSECRETSECRETSECRET12", "[redacted]"),
        ("tool/1.0.0/sk-abcdefghijklmnopqrstu", "[redacted]"),
        ("tool/1.0.0/abcdef0123456789abcdef0123456789", "[redacted]"),
    ],
)
def test_key_like_parts_are_masked(agent: str, logged: str) -> None:
    assert user_agent_of(agent) == logged


def test_bounded_and_printable() -> None:
    logged = user_agent_of("a\x00b/1.0 " + "word " * 100)
    assert logged is not None and len(logged) == 160 and logged.startswith("a?b/1.0 ")
