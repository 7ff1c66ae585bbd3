"""Every corpus body classifies as expected; every error type has real examples."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import ErrorType, TransportError
from gateway.policy.classify import classify

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
NOW = 1_795_000_000.0  # 2026-11-18, fixed so dated headers are deterministic


def load_cases() -> list[dict[str, Any]]:
    cases = []
    for path in sorted(CORPUS.glob("*.json")):
        for case in json.loads(path.read_text())["cases"]:
            cases.append({**case, "file": path.name})
    return cases


CASES = load_cases()


def body_bytes(body: Any) -> bytes:
    return body.encode() if isinstance(body, str) else json.dumps(body).encode()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_case(case: dict[str, Any]) -> None:
    headers = {k.lower(): v for k, v in case["headers"].items()}
    c = classify(case["status"], headers, body_bytes(case["body"]), now_s=NOW)
    expected = case["expected"]
    assert c.type.value == expected["type"]
    assert c.retryable is c.type.retryable
    if "retry_after_s" in expected:
        assert c.retry_after_s == pytest.approx(expected["retry_after_s"])
        assert c.reset_at_ms == round((NOW + expected["retry_after_s"]) * 1000)
    if "provider_code" in expected:
        assert c.provider_code == expected["provider_code"]


def test_corpus_is_complete() -> None:
    assert len(CASES) >= 40
    by_type = Counter(c["expected"]["type"] for c in CASES)
    for t in ErrorType:
        assert by_type[t.value] >= 2, f"{t.value} needs corpus examples"
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names))
    for c in CASES:
        assert c["source"].strip(), c["name"]


def test_overflow_message_is_kept_for_compression() -> None:
    case = next(c for c in CASES if c["name"] == "openai-overflow-with-completion")
    c = classify(400, {}, body_bytes(case["body"]), now_s=NOW)
    assert c.message is not None and "7000 in the messages" in c.message


@pytest.mark.parametrize("kind", list(TransportError))
def test_no_response_is_provider_unavailable(kind: TransportError) -> None:
    c = classify(None, {}, b"", now_s=NOW, transport_error=kind)
    assert c.type is ErrorType.PROVIDER_UNAVAILABLE and c.retryable


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, b"", ErrorType.UNKNOWN),
        (429, b"", ErrorType.RATE_LIMIT),
        (402, b"not json at all", ErrorType.BUDGET),
        (503, b"\xff\xfe garbage", ErrorType.PROVIDER_UNAVAILABLE),
        (500, b"[" * 100_000, ErrorType.PROVIDER_UNAVAILABLE),
        (400, b'{"error": null}', ErrorType.UNKNOWN),
        (400, b'{"error": {"message": 42, "code": ["x"]}}', ErrorType.UNKNOWN),
        (418, b"{}", ErrorType.UNKNOWN),
        (408, b"", ErrorType.PROVIDER_UNAVAILABLE),
        (413, b'{"error": {"message": "Request Entity Too Large"}}', ErrorType.UNKNOWN),
        (413, b'{"error": {"message": "Request exceeds the context window of this model"}}', ErrorType.CONTEXT_OVERFLOW),
        (429, b'{"error": {"message": "too many tokens per minute"}}', ErrorType.RATE_LIMIT),
    ],
)
def test_malformed_and_bare_bodies(status: int, body: bytes, expected: ErrorType) -> None:
    assert classify(status, {}, body, now_s=NOW).type is expected


def test_huge_body_is_scanned_only_at_its_head() -> None:
    body = json.dumps({"error": {"message": "prompt is too long: 300000 tokens > 200000 maximum"}}).encode()
    assert classify(400, {}, body + b" " * 10_000_000, now_s=NOW).type is ErrorType.CONTEXT_OVERFLOW
