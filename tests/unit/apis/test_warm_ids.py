"""The ids of the WebSocket mode's ``generate: false`` responses (gateway/apis/responses/warm_ids.py)."""

from __future__ import annotations

import json
import re

from gateway.apis.responses.warm_ids import WarmIds, not_found_body

# OpenAI's API reference writes a response id so (GET /responses/{response_id}).
OPENAI_ID = "resp_67cb71b351908190a308f3859487620d06981a8637e6bc44"


def test_an_id_looks_as_openais_do_and_is_known_again() -> None:
    ids = WarmIds.keyed("the-secret")
    minted = {ids.mint() for _ in range(50)}
    assert len(minted) == 50
    shape = re.compile(r"^resp_[0-9a-f]{48}$")
    assert shape.match(OPENAI_ID)
    assert all(shape.match(rid) and ids.made(rid) for rid in minted)


def test_the_same_secret_knows_another_process_s_ids_and_no_other_key_does() -> None:
    rid = WarmIds.keyed("the-secret").mint()
    assert WarmIds.keyed("the-secret").made(rid)  # another worker, a replica given the same file
    assert not WarmIds.keyed("another").made(rid)
    assert not WarmIds.keyed(None).made(rid)  # a process's own random key


def test_a_providers_id_or_a_tampered_one_is_not_the_gateways() -> None:
    ids = WarmIds.keyed("the-secret")
    rid = ids.mint()
    flipped = rid[:-1] + ("0" if rid[-1] != "0" else "1")
    for other in (OPENAI_ID, flipped, rid.upper(), rid + "0", rid[:-1], "resp_unknown", "", "resp_" + "é" * 48):
        assert not ids.made(other), other


def test_the_answer_is_openais_400_for_an_unknown_previous_response() -> None:
    assert json.loads(not_found_body("resp_x")) == {"error": {
        "message": "Previous response with id 'resp_x' not found.", "type": "invalid_request_error",
        "param": "previous_response_id", "code": "previous_response_not_found"}}  # fmt: skip
