"""The provider error corpus (tests/corpus/), loaded and classified the way the gateway does.

Shared by the unit tests, the held-out check, the gateway test and the accuracy report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.errors import Classification
from gateway.policy.classify import RequestFacts, classify, classify_stream_event
from gateway.stream_error import first_error_event

CORPUS = Path(__file__).resolve().parent / "corpus"
NOW = 1_795_000_000.0  # 2026-11-18T11:06:40Z, fixed so dated headers are deterministic


def load_cases(folder: Path = CORPUS) -> list[dict[str, Any]]:
    cases = []
    for path in sorted(folder.glob("*.json")):
        cases.extend({**case, "file": path.name} for case in json.loads(path.read_text())["cases"])
    return cases


IN_SAMPLE = load_cases()  # the rules were written against these
HELD_OUT = load_cases(CORPUS / "heldout")  # ... and never against these


def body_bytes(body: Any) -> bytes:
    return body.encode() if isinstance(body, str) else json.dumps(body).encode()


def api_of(case: dict[str, Any]) -> str:
    """The wire API the body came on: named by the case, else Anthropic's file is Messages."""
    return str(case.get("api") or ("messages" if case["file"] == "anthropic.json" else "chat"))


def classify_case(case: dict[str, Any]) -> Classification:
    """As the gateway does: an HTTP error by its status, a streamed one by its error event."""
    body = body_bytes(case["body"])
    if case.get("stream"):
        payload = first_error_event(api_of(case), body)
        assert payload is not None, f"{case['name']}: the {api_of(case)} reader finds no error event"
        return classify_stream_event(payload, now_s=NOW)
    headers = {k.lower(): v for k, v in case["headers"].items()}
    # A case that names its upstream's host is classified knowing it, as the gateway does.
    facts = RequestFacts(host=case["host"]) if case.get("host") else None
    return classify(case["status"], headers, body, now_s=NOW, request=facts)
