"""The Responses API's WebSocket mode as data (gateway/apis/responses/websocket.py): what a frame
asks, and how a turn chained to the connection's last response is made whole. The frames are as
Codex 0.171 and the Agents SDK 0.24 send them (``stream: true`` included, which the mode's
documentation says not to send) and as the openai SDK 3.57 types them
(``openai/types/responses/responses_client_event.py``)."""

from __future__ import annotations

import json

from gateway.apis.responses.websocket import (
    SHUTTING_DOWN,
    TURNED_OFF,
    Create,
    FrameRefused,
    Last,
    aged,
    chained_to,
    due,
    error_frame,
    expanded,
    forgotten,
    lane_limit,
    queue_full,
    read_frame,
    refusal_error,
    remembered,
    still_streaming,
    unstarted,
    warm_response,
)

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def test_a_create_is_the_post_body_it_stands_for_streamed() -> None:
    frame = {"type": "response.create", "model": "gpt-5", "stream": True, "input": [USER], "stream_id": "a"}
    got = read_frame(json.dumps(frame))
    assert got == Create({"model": "gpt-5", "stream": True, "input": [USER]}, "a", True)
    quiet = read_frame(json.dumps({"type": "response.create", "model": "gpt-5", "input": "hi", "generate": False}))
    assert isinstance(quiet, Create) and quiet.body["stream"] is True and quiet.generate is False
    assert "generate" not in quiet.body


def test_codexs_acknowledgement_needs_no_answer_and_other_frames_are_refused() -> None:
    assert read_frame('{"type": "response.processed", "response_id": "resp_1"}') is None
    assert isinstance(read_frame("{nope"), FrameRefused) and read_frame("{nope").code == "invalid_json"
    assert read_frame("[1]").code == "invalid_body"  # type: ignore[union-attr]
    other = read_frame('{"type": "response.cancel", "stream_id": "b"}')
    assert isinstance(other, FrameRefused) and other.code == "invalid_event" and other.lane == "b"
    background = read_frame('{"type": "response.create", "model": "m", "background": true}')
    assert isinstance(background, FrameRefused) and background.param == "background"
    assert read_frame('{"type": "response.create", "stream_id": 5}').param == "stream_id"  # type: ignore[union-attr]


def test_a_turn_chained_to_the_last_response_gets_its_conversation() -> None:
    output = [{"type": "function_call", "call_id": "c1", "name": "sh", "arguments": "{}"}]
    last = remembered({"model": "m", "input": "hi"}, {"id": "resp_1", "output": output})
    assert last == Last("resp_1", ({"role": "user", "content": "hi"}, *output))
    result = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    body = expanded({"model": "m", "previous_response_id": "resp_1", "input": [result], "store": False}, last)
    assert body == {"model": "m", "input": [{"role": "user", "content": "hi"}, *output, result], "store": False}
    # Another id is the upstream's to find (a stored response); no memory, nothing to expand.
    other = {"model": "m", "previous_response_id": "resp_0", "input": [result]}
    assert expanded(other, last) is other and expanded(other, None) is other
    assert remembered({"input": []}, {"id": "resp_2"}) is None  # no output to chain from


def test_a_turn_chained_to_a_response_that_went_on_from_a_stored_one_keeps_that_one() -> None:
    """Turn 3 chained to a response the upstream holds (not the connection's last: sent as it
    came); turn 4, chained to turn 3's, goes on from that stored response, with turn 3's items
    and its own: what the stored response holds is not lost."""
    result = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    sent3 = {"model": "m", "previous_response_id": "resp_stored_elsewhere", "input": [USER], "store": False}
    output3 = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yes"}]}]
    last = remembered(sent3, {"id": "resp_3", "output": output3})
    assert last == Last("resp_3", (USER, *output3), "resp_stored_elsewhere")
    body = expanded({"model": "m", "previous_response_id": "resp_3", "input": [result], "store": False}, last)
    assert body == {"model": "m", "previous_response_id": "resp_stored_elsewhere",
                    "input": [USER, *output3, result], "store": False}  # fmt: skip
    # And the next one goes on from the same stored response, with all the items since.
    again = remembered(body, {"id": "resp_4", "output": []})
    assert again == Last("resp_4", (USER, *output3, result), "resp_stored_elsewhere")


def test_a_turn_chained_to_a_response_its_upstream_holds_goes_as_sent() -> None:
    """A native Responses upstream that stored the last response (``store`` not false) is sent
    the chained turn as it came: its pool pin, stored route and prompt cache go by the id."""
    last = remembered({"model": "m", "input": [USER]}, {"id": "resp_1", "output": []}, held=True)
    assert last is not None and last.held
    body = {"model": "m", "previous_response_id": "resp_1", "input": [USER]}
    assert expanded(body, last) is body


def test_prewarm_is_generate_false() -> None:
    frame = {"type": "response.create", "model": "gpt-5", "input": "hi", "prompt_cache_options": {"prewarm": True}}
    got = read_frame(json.dumps(frame))
    assert isinstance(got, Create) and got.generate is False
    frame["prompt_cache_options"] = {"prewarm": False}
    assert read_frame(json.dumps(frame)).generate is True  # type: ignore[union-attr]


def test_a_warm_turn_is_an_id_and_no_output() -> None:
    response = warm_response({"model": "gpt-5", "tools": []}, 1_700_000_000, "resp_" + "ab" * 24)
    assert response["id"] == "resp_" + "ab" * 24 and response["output"] == [] and response["status"] == "completed"
    assert response["usage"]["total_tokens"] == 0
    assert remembered({"input": [USER]}, response) == Last(response["id"], (USER,))


def test_the_error_frame_is_the_modes_shape() -> None:
    error = {"type": "invalid_request_error", "code": "x", "message": "m", "param": None}
    # The headers at the top (Codex reads them there) and in ``error`` (the openai SDK 3.57's
    # ResponseWsErrorError.headers).
    assert json.loads(error_frame(429, error, "a", {"retry-after": "5"})) == {
        "type": "error", "status": 429, "error": {**error, "headers": {"retry-after": "5"}},
        "headers": {"retry-after": "5"}, "stream_id": "a"}  # fmt: skip
    assert json.loads(error_frame(400, error)) == {"type": "error", "status": 400, "error": error}


def test_a_connection_goes_on_until_a_drain_a_reload_that_turns_the_mode_off_or_its_age() -> None:
    assert due(draining=False, serving=True, age_s=3599.9, max_age_s=3600) is None
    assert due(draining=True, serving=True, age_s=0, max_age_s=3600) is SHUTTING_DOWN
    assert due(draining=False, serving=False, age_s=0, max_age_s=3600) is TURNED_OFF
    assert due(draining=False, serving=True, age_s=3600, max_age_s=3600) == aged(3600)
    # A drain outranks the others: its close says "shutting down", which clients retry elsewhere.
    assert due(draining=True, serving=False, age_s=9999, max_age_s=3600) is SHUTTING_DOWN
    assert {SHUTTING_DOWN.code, TURNED_OFF.code, aged(1).code} == {1001}
    assert SHUTTING_DOWN.error is None and TURNED_OFF.error is None


def test_the_limit_event_is_openais_shape() -> None:
    """The WebSocket mode guide's event, as Codex's own test of it has it: status 400, type
    invalid_request_error, no stream_id (the connection's error, not a turn's)."""
    refused = aged(3600).error
    assert refused is not None
    frame = json.loads(error_frame(refused.status, refusal_error(refused), refused.lane))
    assert frame["type"] == "error" and frame["status"] == 400 and "stream_id" not in frame
    assert frame["error"]["type"] == "invalid_request_error"
    assert frame["error"]["code"] == "websocket_connection_limit_reached"
    assert "60 minutes" in frame["error"]["message"]
    assert "1 minute;" in aged(60).error.message and "90 seconds" in aged(90).error.message  # type: ignore[union-attr]
    assert len(aged(3600).reason) <= 123  # a close reason's most (RFC 6455 §5.5)


# The guide's "Run conversations in parallel" (https://developers.openai.com/api/docs/guides/websocket-mode):
# a stream_id is 1-256 letters, digits, "_", "-" or "."; the invalid_stream_id event names no lane.
def test_a_stream_id_the_guide_does_not_allow_is_refused_naming_no_lane() -> None:
    for bad in (5, "", "a b", "x" * 257, "lane/1", "é"):
        refused = read_frame(json.dumps({**_CREATE, "stream_id": bad}))
        assert isinstance(refused, FrameRefused), bad
        assert (refused.status, refused.code, refused.param, refused.lane) == (400, "invalid_stream_id", "stream_id", None)
    for good in ("a", "planner", "agent_33", "fork-1.b", "x" * 256):
        assert isinstance(read_frame(json.dumps({**_CREATE, "stream_id": good})), Create), good


def test_a_turn_goes_on_from_the_last_of_whichever_lane_it_names() -> None:
    """Each lane remembers its own last response; a turn on a new lane chained to another's
    forks it (the guide: "stream_id controls routing; previous_response_id controls lineage")."""
    planner = Last("resp_p", ({"role": "user", "content": "plan"},))
    research = Last("resp_r", ({"role": "user", "content": "risks"},))
    assert chained_to({"previous_response_id": "resp_r"}, [planner, research]) is research
    assert chained_to({"previous_response_id": "resp_p"}, [planner, research]) is planner
    assert chained_to({"previous_response_id": "resp_x"}, [planner, research]) is None
    assert chained_to({"input": "hi"}, [planner]) is None


def test_a_lane_past_the_connections_32_is_refused_with_its_stream_id() -> None:
    refused = lane_limit("agent_33")
    assert (refused.status, refused.code, refused.param, refused.lane) == (
        400, "websocket_stream_limit_reached", "stream_id", "agent_33")  # fmt: skip
    assert "32" in refused.message
    frame = json.loads(error_frame(refused.status, refusal_error(refused), refused.lane))
    assert frame["stream_id"] == "agent_33" and frame["error"]["type"] == "invalid_request_error"


_CREATE = {"type": "response.create", "model": "m", "input": "hi"}


def test_a_turn_a_connection_will_not_start_is_refused_on_its_lane_saying_why() -> None:
    """Each way a connection ends has its own code for the turns it does not start, carried on
    their lane; a drain's is a server error a client retries elsewhere."""
    codes = {leave.unstarted.code: leave.unstarted.status for leave in (SHUTTING_DOWN, TURNED_OFF, aged(60))}
    assert codes == {"gateway_shutdown": 503, "websocket_not_supported": 426,
                     "websocket_connection_limit_reached": 400}  # fmt: skip
    refused = unstarted(SHUTTING_DOWN, "a")
    frame = json.loads(error_frame(refused.status, refusal_error(refused), refused.lane))
    assert frame["stream_id"] == "a" and frame["error"]["type"] == "server_error" and frame["status"] == 503
    assert unstarted(TURNED_OFF, None).lane is None and TURNED_OFF.unstarted.lane is None
    assert refusal_error(unstarted(aged(60), "b"))["type"] == "invalid_request_error"


def test_a_turn_past_what_a_connection_holds_is_refused_on_its_lane() -> None:
    named, default = queue_full("a"), queue_full(None)
    assert (named.status, named.code, named.lane, named.param) == (429, "websocket_queue_full", "a", "stream_id")
    assert default.lane is None and default.param is None
    assert "24 turns" in named.message


def test_a_fork_of_a_response_still_generated_is_not_found_on_the_forking_lane() -> None:
    refused = still_streaming("resp_x", "b")
    assert (refused.status, refused.code, refused.param, refused.lane) == (
        400, "previous_response_not_found", "previous_response_id", "b")  # fmt: skip
    assert refused.message.startswith("Previous response with id 'resp_x' not found")


def test_a_remembered_response_weighs_its_items_as_json() -> None:
    last = remembered({"input": "hi"}, {"id": "resp_1", "output": [USER]})
    assert last is not None and last.size == len(json.dumps([{"role": "user", "content": "hi"}, USER],
                                                           separators=(",", ":")))  # fmt: skip


def test_the_least_recently_used_lanes_are_forgotten_past_the_bound() -> None:
    lasts = {lane: Last(f"resp_{lane}", (), size=size) for lane, size in (("a", 400), (None, 300), ("c", 500))}
    assert forgotten(lasts, 1200) == []
    assert forgotten(lasts, 1000) == ["a"]
    assert forgotten(lasts, 500) == ["a", None]
    assert forgotten(lasts, 499) == ["a", None, "c"]  # the newest too, where it alone is over
