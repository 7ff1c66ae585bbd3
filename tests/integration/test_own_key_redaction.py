"""The operator's upstream key never reaches a client through a provider's error.

The bodies are the audit's scripted upstream, a server that echoes the credential it was sent
in its errors (the threat, not a provider's corpus case); the masked form keeps a key's first
eight characters and last four, as OpenAI prints a project key ("sk-proj-****abcd";
tests/unit/test_redaction.py has its own wording).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakeupstream import Reply, Stream, chunk
from tests.integration.test_gemini_on_chat import CHAT_ONLY, corpus, post

KEY = "sk-UPCANARY-scr-0123456789abcdefXYZ"
OWN = f", api_key: {KEY}"
NO_RETRY = "retry: {provider_unavailable: {max_retries: 0}, rate_limit: {max_retries: 0}}\n"
QUOTA = {"error": {"message": f"Key {KEY} has exceeded its credit balance: insufficient credits",
                   "type": "insufficient_quota", "code": "insufficient_quota"}}  # fmt: skip


def masked(key: str) -> str:
    return f"{key[:8]}{'*' * 20}{key[-4:]}"


async def test_a_budget_error_quoting_the_key_reaches_the_client_without_it(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=OWN)
    gw.fake.script(Reply(403, QUOTA))
    status, headers, body = await gw.chat(headers={"Authorization": "Bearer client-key"})
    assert status == 402 and headers["x-llm-error-type"] == "budget"
    assert KEY.encode() not in body
    assert json.loads(body) == {"error": {"message": "Key [redacted] has exceeded its credit balance: "
                                          "insufficient credits", "type": "insufficient_quota",
                                          "code": "insufficient_quota"}}  # fmt: skip


async def test_every_class_and_a_masked_key_are_redacted(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=OWN, extra_yaml=NO_RETRY)
    plain = f"upstream internal error; debug: auth={KEY}".encode()
    gw.fake.script(Reply(500, plain, {"Content-Type": "text/plain"}))
    status, _, body = await gw.chat()
    assert status == 500 and body == b"upstream internal error; debug: auth=[redacted]"
    # Refused as the audit's upstream words it (a 400: not read as the key refused, so relayed).
    wording = f"API key {masked(KEY)} is not valid for this project"
    gw.fake.script(Reply(400, {"error": {"message": wording, "type": "invalid_request_error", "code": None}}))
    status, _, body = await gw.chat()
    assert status == 400 and masked(KEY).encode() not in body, body
    assert json.loads(body)["error"]["message"] == "API key [redacted] is not valid for this project"


async def test_a_client_whose_own_key_is_forwarded_reads_it_as_sent(make_gateway) -> None:
    gw = await make_gateway()  # no api_key: the client's credential goes upstream, its own to read
    gw.fake.script(Reply(403, QUOTA))
    _, _, body = await gw.chat(headers={"Authorization": f"Bearer {KEY}"})
    assert json.loads(body) == QUOTA


async def test_translated_clients_read_neither_the_key_nor_the_upstream_body_with_it(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=OWN + CHAT_ONLY, extra_yaml=NO_RETRY)
    gw.fake.script(Reply(403, QUOTA))
    status, _, body = await post(gw, "/v1beta/models/gemini-2.5-flash:generateContent", corpus("gemini-cli-0.61-first"))
    err = json.loads(body)["error"]
    assert status == 402 and KEY.encode() not in body
    assert err["x_llm_upstream"]["body"] == {**QUOTA, "error": {
        **QUOTA["error"], "message": "Key [redacted] has exceeded its credit balance: insufficient credits"}}
    payload: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 64,
                               "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    gw.fake.script(Reply(403, QUOTA))
    status, _, body = await gw.messages(payload)
    assert status == 402 and KEY.encode() not in body and b"[redacted]" in body


async def stream_body(gw: Any) -> bytes:
    payload = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload) as r:
        return await r.read()


async def test_an_error_event_before_any_output_is_redacted(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=OWN, extra_yaml=NO_RETRY)
    gw.fake.script(Stream([{"error": {"message": f"stream failed for key {KEY}", "type": "server_error",
                                      "code": 500}}]))  # fmt: skip
    body = await stream_body(gw)
    assert KEY.encode() not in body and b"[redacted]" in body, body


async def test_a_mid_stream_auth_event_blames_the_operators_key_without_quoting_it(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=OWN)
    event = {"error": {"message": f"stream failed for key {KEY}", "code": 401}}
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hel"}), event]))
    body = await stream_body(gw)
    assert KEY.encode() not in body
    *_, last = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: {")]
    error = last["error"]
    assert error["x_llm_error_type"] == "auth" and error["code"] == "upstream_auth"
    assert "the gateway's operator must fix its api_key" in error["message"]


async def test_a_mid_stream_event_of_another_class_is_redacted(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=OWN)
    event = {"error": {"message": f"Key {KEY} has exceeded its credit balance", "code": "insufficient_quota"}}
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hel"}), event]))
    body = await stream_body(gw)
    assert KEY.encode() not in body and b"Key [redacted] has exceeded its credit balance" in body


# A gateway in front of the provider takes its own key in a header the operator configures
# (Portkey's x-portkey-api-key, Cloudflare AI Gateway's cf-aig-authorization), beside the
# client's own provider key, which is forwarded.
PORTKEY = "pk-UPCANARY-hdr-0123456789abcdef"
CF_TOKEN = "cf-UPCANARY-tok-9876543210zyxw"
HEADERS = f", headers: {{x-portkey-api-key: {PORTKEY}, cf-aig-authorization: 'Bearer {CF_TOKEN}'}}"


async def test_credentials_among_the_configured_headers_are_redacted_too(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=HEADERS, extra_yaml=NO_RETRY)
    dump = f"upstream internal error; debug: x-portkey-api-key={PORTKEY} cf-aig-authorization=Bearer {CF_TOKEN}"
    gw.fake.script(Reply(500, dump.encode(), {"Content-Type": "text/plain"}))
    status, _, body = await gw.chat(headers={"Authorization": "Bearer client-key"})
    said = gw.fake.chat_requests()[-1].headers
    assert said["x-portkey-api-key"] == PORTKEY and said["authorization"] == "Bearer client-key"
    assert status == 500
    assert body == b"upstream internal error; debug: x-portkey-api-key=[redacted] cf-aig-authorization=Bearer [redacted]"
    event = {"error": {"message": f"Gateway key {masked(PORTKEY)} has exceeded its credit balance",
                       "code": "insufficient_quota"}}  # fmt: skip
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hel"}), event]))
    body = await stream_body(gw)
    assert PORTKEY[:12].encode() not in body and b"Gateway key [redacted] has exceeded its credit balance" in body


async def test_the_loop_breaker_remembers_the_body_without_the_key(make_gateway) -> None:
    """Remembered answers are kept in the state store (Redis: ``llm-gateway:a:<mac>``), so
    what it keeps is what a client may be shown."""
    gw = await make_gateway(upstream_yaml=OWN, extra_yaml="loop_breaker: {enabled: true}\n")
    gw.fake.script(Reply(403, QUOTA))
    first = await gw.chat()
    second = await gw.chat()
    assert second[1]["x-llm-attempts"] == "0" and second[2] == first[2]
    assert KEY.encode() not in second[2] and b"[redacted]" in second[2]


async def test_headers_naming_the_operators_account_are_not_relayed_for_its_key(make_gateway) -> None:
    """OpenAI's openai-organization is "the organization associated with the request"
    (developers.openai.com/api/reference/overview, "Debugging requests"): the operator's."""
    operator = {"openai-organization": "org-operator", "openai-project": "proj_operator",
                "set-cookie": "__cf_bm=abc; path=/; HttpOnly", "x-ratelimit-remaining-requests": "99"}  # fmt: skip
    gw = await make_gateway(upstream_yaml=OWN)
    gw.fake.script(Reply(200, {"id": "x", "object": "chat.completion", "choices": []}, operator),
                   Reply(403, QUOTA, operator))  # fmt: skip
    for _ in range(2):
        _, headers, _ = await gw.chat()
        assert not {"openai-organization", "openai-project", "set-cookie"} & {k.lower() for k in headers}
        assert headers["x-ratelimit-remaining-requests"] == "99"
    forwarded = await make_gateway()  # the client's own key: its own organization, as it came
    forwarded.fake.script(Reply(200, {"id": "x", "object": "chat.completion", "choices": []}, operator))
    _, headers, _ = await forwarded.chat(headers={"Authorization": "Bearer sk-client"})
    assert headers["openai-organization"] == "org-operator" and "set-cookie" in headers


async def test_a_translated_error_from_a_plain_text_body_is_labelled_json(make_gateway) -> None:
    """The audit's Gemini client got Google's JSON envelope under the upstream's
    ``Content-Type: text/plain``."""
    gw = await make_gateway(upstream_yaml=OWN + CHAT_ONLY, extra_yaml=NO_RETRY)
    gw.fake.script(Reply(500, b"upstream internal error", {"Content-Type": "text/plain"}))
    status, headers, body = await post(gw, "/v1beta/models/gemini-2.5-flash:generateContent",
                                       corpus("gemini-cli-0.61-first"))  # fmt: skip
    assert status == 500 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["x_llm_upstream"]["status"] == 500
