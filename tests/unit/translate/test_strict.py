"""Which root definitions a schema sent in strict mode keeps (gateway/translate/strict.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.translate.strict import for_strict

_P = {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"], "additionalProperties": False}
_NAME = {"type": "string", "pattern": "^x"}


def _schema(a: dict[str, Any], **defs: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"a": a}, "required": ["a"], "additionalProperties": False,
            "$defs": defs}  # fmt: skip


def test_a_definition_nothing_refers_to_is_left_out() -> None:
    assert for_strict(_schema({"$ref": "#/$defs/P"}, P=_P, U=_P)) == _schema({"$ref": "#/$defs/P"}, P=_P)


@pytest.mark.parametrize(("ref", "name"), [
    ("#/$defs/A%20B", "A B"),  # a URI fragment: percent-encoded, as JSON Schema writes a space
    ("#/$defs/a~1b", "a/b"),  # a JSON pointer's escape
    ("#/$defs/a%7E1b", "a/b"),  # both: decoded first, then unescaped
])  # fmt: skip
def test_a_reference_to_an_escaped_name_keeps_its_definition(ref: str, name: str) -> None:
    """``A%20B`` was looked up as written, not found, and ``A B`` left out though referred to."""
    assert for_strict(_schema({"$ref": ref}, **{name: _P, "U": _P})) == _schema({"$ref": ref}, **{name: _P})


def test_a_reference_under_a_keyword_the_schema_walk_skips_keeps_its_definition() -> None:
    """``propertyNames`` is not a keyword ``json_schema.nested`` walks: its reference went unseen
    and the definition was left out."""
    a = {"type": "object", "properties": {}, "additionalProperties": False, "propertyNames": {"$ref": "#/$defs/N"}}
    assert for_strict(_schema(a, N=_NAME, U=_P)) == _schema(a, N=_NAME)


def test_a_reference_to_a_name_not_found_leaves_the_definitions_as_they_came() -> None:
    """What it names might be one of those left out under another spelling: none is."""
    given = _schema({"$ref": "#/$defs/Missing"}, P=_P, U=_P)
    assert for_strict(given) == given
