"""gateway/redaction.py: the operator's key, whole or masked, out of a provider's words.

The masked wordings are OpenAI's ("Incorrect API key provided: sk-abc***xyz",
platform.openai.com/docs/guides/error-codes; a project key printed as its first eight
characters, stars and its last four); the keys are made up for the test.
"""

from __future__ import annotations

import pytest

from gateway.redaction import redact_bytes, redact_text, upstream_secrets

KEY = "sk-proj-AbCdEfGh1234567890wxyz"


@pytest.mark.parametrize(("said", "told"), [
    (f"Key {KEY} has exceeded its credit balance", "Key [redacted] has exceeded its credit balance"),
    ("Incorrect API key provided: sk-proj-********wxyz.", "Incorrect API key provided: [redacted]."),
    ("Incorrect API key provided: sk-proj-AbCd*****************wxyz.", "Incorrect API key provided: [redacted]."),
    ("key sk-proj-…wxyz, sk-proj-...wxyz, sk-proj-\\u2022\\u2022wxyz", "key [redacted], [redacted], [redacted]"),
    ('{"message": "auth=' + KEY + '"}', '{"message": "auth=[redacted]"}'),
    # Not this key: another start after the first eight, another end, a longer end, too little kept.
    ("sk-proj-ZZZZ****wxyz", "sk-proj-ZZZZ****wxyz"),
    ("sk-proj-****abcd", "sk-proj-****abcd"),
    ("sk-proj-****wxyzq", "sk-proj-****wxyzq"),
    ("Incorrect API key provided: sk-abc***xyz.", "Incorrect API key provided: sk-abc***xyz."),
    ("sk-proj-AbCdEfGh is a prefix only", "sk-proj-AbCdEfGh is a prefix only"),
])  # fmt: skip
def test_the_key_and_its_masked_forms_are_replaced_and_nothing_else(said: str, told: str) -> None:
    assert redact_text(said, KEY) == told
    assert redact_bytes(said.encode(), KEY) == told.encode()


def test_no_key_or_a_placeholder_changes_nothing() -> None:
    assert redact_text("no model EMPTY here", None) == "no model EMPTY here"
    assert redact_bytes(b"the EMPTY model", "EMPTY") == b"the EMPTY model"  # vLLM's placeholder key
    short = "abcdefghij"  # long enough to be exact, too short to have a masked middle
    assert redact_text(f"key {short} and abcdefgh**ghij", short) == "key [redacted] and abcdefgh**ghij"


def test_the_secrets_of_an_upstream_are_its_key_and_its_credential_headers() -> None:
    """Header names as the gateways in front of providers document them: Portkey's
    x-portkey-api-key, Cloudflare AI Gateway's cf-aig-authorization (a bearer token),
    Helicone's Helicone-Auth; the values are made up."""
    headers = {"x-portkey-api-key": "pk-0123456789abcdef", "cf-aig-authorization": "Bearer cf-tok-0123456789",
               "Helicone-Auth": "bearer sk-helicone-abcdefgh", "x-session-token": "short",
               "OpenAI-Project": "proj_0123456789abcdef", "HTTP-Referer": "https://app.example.com",
               "anthropic-beta": "prompt-caching-2024-07-31"}  # fmt: skip
    assert upstream_secrets(KEY, headers) == (KEY, "pk-0123456789abcdef", "cf-tok-0123456789", "sk-helicone-abcdefgh")
    assert upstream_secrets(None, {}) == ()
    assert upstream_secrets("EMPTY", {"x-api-token": KEY}) == (KEY,)  # a placeholder key is no secret
