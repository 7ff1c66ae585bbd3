"""Rate-limit headroom from real header sets and from garbage: every field parses on its
own, and nothing raises. The header sets live in tests/corpus/ratelimit/headers.json, not in
tests/corpus/ itself, whose *.json files the error corpus loads as error bodies."""

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.routing.headroom import Headroom, headroom_of

CORPUS = Path(__file__).parents[2] / "corpus" / "ratelimit" / "headers.json"
CASES: list[dict[str, Any]] = json.loads(CORPUS.read_text())["cases"]
NOW = 1_700_000_000.0


def _as_found(h: Headroom | None) -> dict[str, Any] | None:
    return asdict(h) if h is not None else None


def _expected(case: dict[str, Any]) -> dict[str, Any] | None:
    """A case's expectation; the tokens window meters input and output together unless it says."""
    expected = case["expected"]
    return {"tokens_meter": 0, **expected} if expected is not None else None


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_as_aiohttp_hands_it_over(case: dict[str, Any]) -> None:
    """A CIMultiDictProxy keeps the provider's spelling ("Date", "CF-RAY") and still matches."""
    headers = CIMultiDictProxy(CIMultiDict(case["headers"]))
    assert _as_found(headroom_of(headers, case["now_s"])) == _expected(case)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_as_a_lower_cased_dict(case: dict[str, Any]) -> None:
    headers = {k.lower(): v for k, v in case["headers"].items()}
    assert _as_found(headroom_of(headers, case["now_s"])) == _expected(case)


def test_every_case_names_its_source() -> None:
    for case in CASES:
        source = case["source"]
        assert source.startswith("constructed: ") or "http" in source, case["name"]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # Nothing at all, or a family's limit/reset without its remaining count: no headroom said.
        ({}, None),
        ({"content-type": "application/json"}, None),
        ({"x-ratelimit-limit-requests": "60", "x-ratelimit-reset-requests": "1s"}, None),
        # Garbage everywhere: said, but nothing usable.
        ({"x-ratelimit-remaining-requests": "lots", "x-ratelimit-remaining-tokens": ""}, None),
        ({"anthropic-ratelimit-requests-remaining": "-1"}, None),
    ],
)
def test_nothing_usable_is_none(headers: dict[str, str], expected: None) -> None:
    assert headroom_of(headers, NOW) is expected


@pytest.mark.parametrize(
    ("raw", "count"),
    [("42", 42), (" 42 ", 42), ("0", 0), ("1000000000", 10**9), (str(10**15), 10**15),
     (str(10**15 + 1), None), ("-1", None), ("+5", None), ("1_000", None), ("12.5", None),
     ("1e3", None), ("٣", None), ("", None), ("NaN", None), ("0x10", None)],
)
def test_counts(raw: str, count: int | None) -> None:
    got = headroom_of({"x-ratelimit-remaining-requests": raw, "x-ratelimit-limit-requests": "7"}, NOW)
    assert got is not None and got.requests_remaining == count and got.requests_limit == 7


@pytest.mark.parametrize(
    ("raw", "reset_at_ms"),
    [("1s", 1_700_000_001_000), ("20ms", 1_700_000_000_020), ("1h2m3.5s", 1_700_003_723_500),
     ("6m0s", 1_700_000_360_000), ("0s", 1_700_000_000_000), ("7", 1_700_000_007_000),
     ("744h", 1_702_678_400_000),  # 31 days: a monthly window still reads
     ("745h", None), ("-1s", None), ("nan", None), ("inf", None), ("-5", None), ("1e400", None),
     ("soon", None), ("", None)],
)
def test_go_duration_resets(raw: str, reset_at_ms: int | None) -> None:
    got = headroom_of({"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": raw}, NOW)
    assert got is not None and got.tokens_reset_at_ms == reset_at_ms and got.tokens_remaining == 5


@pytest.mark.parametrize(
    ("raw", "reset_at_ms"),
    [("2023-11-14T22:13:30Z", 1_700_000_010_000), ("2023-11-14T23:13:30+01:00", 1_700_000_010_000),
     ("2023-11-14T22:13:20.250Z", 1_700_000_000_250),
     ("2023-11-14T22:00:00Z", 1_700_000_000_000),  # already past: resets now
     ("2023-11-14T22:13:30", None),  # no offset: no instant
     ("2099-01-01T00:00:00Z", None), ("tomorrow", None), ("", None)],
)
def test_rfc3339_resets(raw: str, reset_at_ms: int | None) -> None:
    headers = {"anthropic-ratelimit-requests-remaining": "3", "anthropic-ratelimit-requests-reset": raw}
    got = headroom_of(headers, NOW)
    assert got is not None and got.requests_reset_at_ms == reset_at_ms


@pytest.mark.parametrize(
    ("windows", "picked"),
    [
        # (remaining, limit) per Anthropic token kind; the lowest share left wins.
        ({"tokens": ("9000", "10000"), "input-tokens": ("500", "8000"), "output-tokens": ("1900", "2000")},
         "input-tokens"),
        ({"tokens": ("100", "10000"), "input-tokens": ("500", "8000")}, "tokens"),
        # A kind whose limit is unknown ranks as full, unless nothing is left of it.
        ({"tokens": ("9000", "10000"), "output-tokens": ("5", None)}, "tokens"),
        ({"tokens": ("9000", "10000"), "output-tokens": ("0", None)}, "output-tokens"),
        # A kind without a readable remaining ranks last; it still beats saying nothing.
        ({"tokens": ("junk", "10000"), "input-tokens": ("7000", "8000")}, "input-tokens"),
        ({"output-tokens": ("junk", "2000")}, "output-tokens"),
        # Equal shares: the first listed.
        ({"output-tokens": ("1000", "2000"), "tokens": ("5000", "10000")}, "tokens"),
    ],
)
def test_anthropic_reports_the_tightest_token_window(
    windows: dict[str, tuple[str, str | None]], picked: str
) -> None:
    headers = {}
    for kind, (remaining, limit) in windows.items():
        headers[f"anthropic-ratelimit-{kind}-remaining"] = remaining
        if limit is not None:
            headers[f"anthropic-ratelimit-{kind}-limit"] = limit
        headers[f"anthropic-ratelimit-{kind}-reset"] = f"2023-11-14T22:13:{30 + len(kind)}Z"
    got = headroom_of(headers, NOW)
    remaining, limit = windows[picked]
    assert got is not None
    assert got.tokens_remaining == (int(remaining) if remaining.isdigit() else None)
    assert got.tokens_limit == (int(limit) if limit else None)
    assert got.tokens_reset_at_ms == (1_700_000_000 + len(picked)) * 1000 + 10_000


def test_families_side_by_side_report_the_tightest() -> None:
    """A relay that passes on both OpenAI's and Anthropic's headers: each count is the tighter one."""
    headers = {
        "x-ratelimit-remaining-requests": "10", "x-ratelimit-limit-requests": "100",
        "anthropic-ratelimit-requests-remaining": "500", "anthropic-ratelimit-requests-limit": "1000",
        "x-ratelimit-remaining-tokens": "90000", "x-ratelimit-limit-tokens": "100000",
        "anthropic-ratelimit-tokens-remaining": "1000", "anthropic-ratelimit-tokens-limit": "10000",
    }  # fmt: skip
    assert headroom_of(headers, NOW) == Headroom(
        requests_remaining=10, requests_limit=100, tokens_remaining=1000, tokens_limit=10000
    )


def test_mistral_reset_belongs_to_the_minute_window() -> None:
    month_tighter = {
        "x-ratelimitbysize-remaining-minute": "400000", "x-ratelimitbysize-limit-minute": "500000",
        "x-ratelimitbysize-remaining-month": "1000", "x-ratelimitbysize-limit-month": "1000000000",
        "ratelimitbysize-reset": "40",
    }  # fmt: skip
    assert headroom_of(month_tighter, NOW) == Headroom(tokens_remaining=1000, tokens_limit=10**9)
