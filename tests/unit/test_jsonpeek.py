"""top_level_member agrees with json.loads whenever it answers, whatever the nesting,
the spacing, or strings that quote the key; holds_object_member never says no to a body
that has such a member."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.jsonpeek import holds_object_member, top_level_member

KEYS = st.sampled_from(["usage", "id", "choices", "x", 'say "usage"', "usage\\", "\u00fcsage"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(
    alphabet=st.sampled_from(list('usage"\\:,{}[] \nxé')), max_size=12)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=12)
LAYOUT = st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 2}, {"ensure_ascii": False}])


@settings(max_examples=600)
@given(st.dictionaries(KEYS, VALUES, max_size=5), LAYOUT)
def test_agrees_with_the_full_decode(doc: dict, layout: dict) -> None:
    body = json.dumps(doc, **layout).encode()
    got = top_level_member(body, "usage")
    if got is not None:
        assert "usage" in doc and got == {"usage": doc["usage"]}


def test_real_bodies_are_read_without_the_fallback() -> None:
    chat = {"id": "c", "choices": [{"message": {"content": 'he said "usage": {"prompt_tokens": 1}'}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 7}, "system_fingerprint": "fp"}
    for layout in ({}, {"separators": (",", ":")}, {"indent": 2}):
        body = json.dumps(chat, **layout).encode()
        assert top_level_member(body, "usage") == {"usage": chat["usage"]}
    assert top_level_member(b'{"a": 1, "usage": {"input_tokens": 3}}', "usage") == {"usage": {"input_tokens": 3}}


def test_nested_or_absent_keys_are_not_taken_for_top_level_ones() -> None:
    assert top_level_member(b'{"a": {"usage": {"p": 1}}}', "usage") is None
    assert top_level_member(b'{"a": [{"usage": 1}], "b": 2}', "usage") is None
    assert top_level_member(b'{"a": "x\\"usage\\": 1"}', "usage") is None
    assert top_level_member(b'[{"usage": 1}]', "usage") is None
    assert top_level_member(b'{"usage": 1, "\\u0075sage": 2}', "usage") == {"usage": 2}  # the later one, as json
    assert top_level_member(b'{"usage": {"p": 1}', "usage") is None  # truncated


def test_integers_beyond_64_bits_stay_exact() -> None:
    """orjson reads them as floats; the full decode keeps them exact (hypothesis found
    -2**63 - 1 in a usage member)."""
    for n in (-(2**63) - 1, 2**64, 10**30):
        body = json.dumps({"id": "x", "usage": n}).encode()
        assert top_level_member(body, "usage") == {"usage": n}
        body = json.dumps({"usage": {"prompt_tokens": n}, "z": 1}).encode()
        assert top_level_member(body, "usage") == {"usage": {"prompt_tokens": n}}


def _has_object_member(value: object, key: str) -> bool:
    if isinstance(value, dict):
        return any((k == key and isinstance(v, dict)) or _has_object_member(v, key) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_object_member(v, key) for v in value)
    return False


@settings(max_examples=600)
@given(st.dictionaries(KEYS, VALUES, max_size=5), LAYOUT)
def test_an_object_member_is_never_missed(doc: dict, layout: dict) -> None:
    body = json.dumps(doc, **layout).encode()
    if _has_object_member(doc, "usage"):
        assert holds_object_member(body, b'"usage"')
    if not holds_object_member(body, b'"usage"'):
        assert not _has_object_member(doc, "usage")


def test_an_object_member_is_told_from_a_string_or_a_null_of_that_name() -> None:
    assert holds_object_member(b'{"error": {"code": 502}}', b'"error"')
    assert holds_object_member(b'{"a": [{"error" :\n {}}]}', b'"error"')  # nested, spaced
    assert not holds_object_member(b'{"type": "error", "error": null}', b'"error"')  # a Responses answer's
    assert not holds_object_member(b'{"text": "he wrote \\"error\\": {}"}', b'"error"')  # quoted in a string
    assert not holds_object_member(b'{"error"', b'"error"') and not holds_object_member(b"", b'"error"')
