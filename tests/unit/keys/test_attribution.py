"""The log line's ``session`` (gateway/keys/attribution.py): an agent's id as it sent it, but
no email's local part and no token a client put where its session id goes."""

from __future__ import annotations

import json

import pytest

from gateway.keys.attribution import session_of

CLAUDE_CODE_SESSION = "0199a3f2-7c1e-7a3b-9f1e-3c2d1b0a9e8f"


@pytest.mark.parametrize(("headers", "payload", "logged"), [
    # Agents' own ids stay as sent: Claude Code's header and its JSON user_id, Codex's header.
    ({"x-claude-code-session-id": CLAUDE_CODE_SESSION}, {}, CLAUDE_CODE_SESSION),
    ({}, {"metadata": {"user_id": json.dumps({"session_id": CLAUDE_CODE_SESSION})}}, CLAUDE_CODE_SESSION),
    ({"session-id": "019a-codex-session"}, {}, "019a-codex-session"),
    ({}, {"user": "nightly-eval:run-17"}, "nightly-eval:run-17"),
    ({}, {"user": "4f2a9c0d1e3b5a7c9e1f3a5c7e9b1d3f4f2a9c0d"}, "4f2a9c0d1e3b5a7c9e1f3a5c7e9b1d3f4f2a9c0d"),
    # The OpenAI `user` field as some apps fill it: an email, the person's key, a JWT.
    ({}, {"user": "alice.smith@example.com"}, "***@example.com"),
    ({}, {"user": "sk-proj-AbCdEf0123456789xyz"}, "[redacted]"),
    ({"session-id": "Bearer abc.def"}, {}, "[redacted]"),
    ({}, {"user": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln"}, "[redacted]"),
    ({}, {"user": "tenant-7/AbCdEfGhIjKlMnOpQrStUv0123456789"}, "[redacted]"),
    # A key the gateway issued (gateway/keys/issued.py), however its random part came out.
    ({}, {"user": "llmgw_qx0_7mfa-3kz9p2lbw8c1r5t6yd4ne0hgsuvjio7a2xk"}, "[redacted]"),
])  # fmt: skip
def test_session_ids_stay_and_what_a_client_should_not_have_put_there_goes(
    headers: dict[str, str], payload: dict[str, object], logged: str
) -> None:
    assert session_of(headers, payload) == logged
