"""Every translation, direct or composed through chat, answers a field of the wrong JSON type with
a 400 that names the field as the client's API does (``translate/typed.py``), for each field its
request translator reads and each JSON type the client's API does not allow there; and never
raises on the audit fuzz's values in any field, read or not (a raise was a 500 ``internal_error``).
The tables per direction, with the cases the audit found, are in each direction's own tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.translate import default_translations
from gateway.translate.base import Refusal
from tests.unit.translate.wrong_types import BASE, FIELDS, TARGETS, mutated, named, wrong_values

TABLE = default_translations().table
# A composed direction is checked by its first half: the middle request is the gateway's own.
FIRST = {pair: (pair[0], "chat") if pair[0] != "chat" else pair for pair in TABLE}


def test_each_base_request_translates_in_every_direction() -> None:
    for (client, upstream), translator in TABLE.items():
        out = translator.request(BASE[client], TARGETS[upstream])
        assert not isinstance(out, Refusal), (client, upstream, out)


@pytest.mark.parametrize(
    ("pair", "field", "allowed"),
    [(pair, field, allowed) for pair in sorted(TABLE) for field, allowed in FIELDS[FIRST[pair]]],
    ids=lambda v: "->".join(v) if isinstance(v, tuple) and len(v) == 2 and v[0] in BASE else None,
)
def test_a_field_of_another_json_type_is_a_400_naming_it(
    pair: tuple[str, str], field: str, allowed: tuple[str, ...]
) -> None:
    client, upstream = pair
    for value in wrong_values(allowed):
        out = TABLE[pair].request(mutated(BASE[client], field, value), TARGETS[upstream])
        assert isinstance(out, Refusal) and out.code == "invalid_type", (field, value, out)
        assert named(client, field) in out.message, (field, value, out.message)


# The audit fuzz's values (tmp/auditC/fuzz.py), and the shapes its crashes had.
FUZZ = [5, "x", None, [5], {"a": 1}, True, [None], [{"type": 5}], -1, 1.5, {"type": [5]},
        [{"type": "text", "text": 5}], {"type": "json_schema", "json_schema": "x"}]  # fmt: skip


def _paths(doc: Any, prefix: str = "") -> list[str]:
    """Every member and item of ``doc``, dotted."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    out = []
    for key, value in items:
        path = f"{prefix}{key}"
        out += [path, *_paths(value, path + ".")]
    return out


@pytest.mark.parametrize("pair", sorted(TABLE), ids="->".join)
def test_no_value_in_any_field_raises(pair: tuple[str, str]) -> None:
    client, upstream = pair
    for field in _paths(BASE[client]):
        for value in FUZZ:
            for stream in (False, True):
                payload = {**mutated(BASE[client], field, value), "stream": stream}
                out = TABLE[pair].request(payload, TARGETS[upstream])
                assert isinstance(out, Refusal) or json.dumps(out), (field, value)
