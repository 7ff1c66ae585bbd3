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
