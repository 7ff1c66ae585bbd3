"""Every code the gateway puts in an error it makes is on the generated error page
(docs/reference/errors.md), with its status and class: clients match on these codes, so one the
page lacks is a contract nobody wrote down.

The codes are gathered from the source by gateway/docs_gen/errors.py (the literal in the code
position of each call that makes an error, names bound to literals, the makers' defaults, the
transport tables); a code built at run time (an f-string) cannot be gathered and fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gateway.docs_gen import errors

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "reference" / "errors.md").read_text()


@pytest.fixture(scope="module")
def codes() -> dict[str, errors.Made]:
    return errors.made_codes()


def test_the_collector_finds_the_codes_it_is_meant_to(codes: dict[str, errors.Made]) -> None:
    assert codes["invalid_json"].statuses == {400} and codes["request_timeout"].statuses == {408}
    # Bound in one tuple with their status and class, branch by branch (pipeline/pool.py).
    assert codes["pool_budget"].statuses == {402} and codes["pool_budget"].classes == {"budget"}
    assert codes["pool_auth"].statuses == {502} and codes["pool_auth"].classes == {"auth"}
    assert codes["circuit_open"].classes == {"provider_unavailable"}  # through attempt._unavailable
    assert codes["stream_broken"].statuses == {None}  # ends a stream under way
    assert {"missing_client_key", "invalid_client_key", "circuit_open", "empty_stream", "untranslatable_request",
            "internal_error", "malformed_event", "gateway_shutdown", "stream_broken", "idle_timeout",
            "upstream_unreachable", "invalid_content_encoding"} <= set(codes)
    assert all(m.classes for m in codes.values())


def test_a_code_built_at_run_time_is_refused() -> None:
    call = ast.parse('gateway_failure(400, c, "m", f"bad_{kind}")').body[0].value  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="built at run time"):
        errors._strings(call.args[3], [])


def test_the_error_page_lists_every_code_the_gateway_makes_with_its_status_and_class(
    codes: dict[str, errors.Made],
) -> None:
    rows = [line for line in PAGE.splitlines() if line.startswith("| [`")]
    for code, made in sorted(codes.items()):
        row = next((r for r in rows if r.startswith(f"| [`{code}`]")), None)
        assert row is not None, f"docs/reference/errors.md lacks `{code}`"
        cells = [c.strip() for c in row.split(" | ")]
        for status in made.statuses:
            assert re.search(rf"\b{status}\b" if status else "mid-stream", cells[1]), (code, status)
        for cls in made.classes:
            assert f"`{cls}`" in cells[2], (code, cls)


def test_every_code_has_a_meaning_and_every_meaning_a_code(codes: dict[str, errors.Made]) -> None:
    assert sorted(set(codes) - set(errors.MEANINGS)) == [], "add a meaning to gateway/docs_gen/errors.py MEANINGS"
    assert sorted(set(errors.MEANINGS) - set(codes)) == [], "a meaning for a code the gateway no longer makes"
