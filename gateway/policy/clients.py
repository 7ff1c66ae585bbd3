"""Facts about the agents that talk to the gateway, read from their request headers."""

from __future__ import annotations

from collections.abc import Mapping

# Claude Code sends `x-claude-code-session-id` and a `claude-cli/<version>` user agent on
# every Messages call; Codex sends `originator: codex_cli_rs` and a `codex_cli_rs/` agent.
# Both compact (summarise) their conversation themselves when the provider says it is too long.
_SELF_COMPACTING_AGENTS = ("claude-cli/", "codex_cli_rs/", "codex_exec/")
_SELF_COMPACTING_ORIGINATORS = frozenset({"codex_cli_rs", "codex_exec"})


def compacts_itself(headers: Mapping[str, str]) -> bool:
    """``headers`` must be case-insensitive (aiohttp's request headers are)."""
    if headers.get("x-claude-code-session-id"):
        return True
    if headers.get("originator", "") in _SELF_COMPACTING_ORIGINATORS:
        return True
    agent = headers.get("user-agent", "")
    return agent.startswith(_SELF_COMPACTING_AGENTS)


# The OpenAI and Anthropic SDKs announce how long they will wait (Stainless-generated
# clients send both; Claude Code sends only x-stainless-timeout).
_TIMEOUT_HEADERS = ("x-stainless-read-timeout", "x-stainless-timeout")


def client_deadline_s(headers: Mapping[str, str]) -> float | None:
    """How long the gateway may spend before answering, so that it answers before the
    client's own timeout fires (and the client retries on top of our retries)."""
    announced = []
    for name in _TIMEOUT_HEADERS:
        given = headers.get(name)
        if not given:
            continue  # most clients send neither: no exception raised and caught per request
        try:
            value = float(given)
        except ValueError:
            continue
        if 0 < value < 1e7:
            announced.append(value)
    if not announced:
        return None
    limit = min(announced)
    return max(1.0, limit - max(1.0, 0.05 * limit))


# Gemini CLI gives up on a response whose head has not come within 60 s: its bundle sets
# undici's global dispatcher to `headersTimeout: defaultHeadersTimeout` with
# `var defaultHeadersTimeout = 6e4` (0.61.0, chunk-5FZXKDXH.js), raised only by a Code Assist
# experiment flag, never with an API key. Its user agent is `GeminiCLI/<version>/<model>`, or
# `GeminiCLI-<surface>/...` (`GeminiCLI-tui/0.61.0/gemini-2.5-flash` in `gemini -p`). Every other
# stock client found waits at least as long as timeouts.first_byte_s (300 s): Claude Code and
# the OpenAI and Anthropic SDKs 600 s, Codex's stream idle 300 s.
_GEMINI_CLI = ("GeminiCLI/", "GeminiCLI-")
_GEMINI_CLI_HEAD_S = 60.0


def client_head_s(headers: Mapping[str, str]) -> float | None:
    """How long the gateway may take to send the response head, so that it answers (or gives
    up on an upstream and tries the next) before the client stops waiting for it; None: the
    client waits at least as long as the gateway's own timeouts."""
    if not headers.get("user-agent", "").startswith(_GEMINI_CLI):
        return None
    return _GEMINI_CLI_HEAD_S - max(1.0, 0.05 * _GEMINI_CLI_HEAD_S)
