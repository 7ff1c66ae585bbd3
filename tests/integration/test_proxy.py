"""The transparent proxy: bodies, statuses, headers, streaming, routing, auth."""

import asyncio
import json
import time

from tests.fakeupstream import FakeUpstream, Reply, Stream, chunk


async def test_success_is_relayed_byte_for_byte(make_gateway) -> None:
    gw = await make_gateway()
    raw = b'{"id":"x","object":"chat.completion","choices":[],"weird":  [1, 2]}'
    gw.fake.script(Reply(200, raw, {"Content-Type": "application/json; charset=utf-8", "x-custom": "kept"}))
    status, headers, body = await gw.chat()
    assert (status, body) == (200, raw)
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert headers["x-custom"] == "kept"
    assert headers["x-llm-attempts"] == "1"
    assert "x-llm-error-type" not in headers


async def test_request_body_reaches_the_upstream_unchanged(make_gateway) -> None:
    gw = await make_gateway()
    raw = b'{"model": "gpt-4o-mini",  "messages": [{"role": "user", "content": "h\\u00e9"}], "x": 1}'
    await gw.chat(data=raw, headers={"Content-Type": "application/json"})
    assert gw.fake.chat_requests()[-1].body == raw


async def test_stream_is_relayed_as_it_arrives_not_buffered(make_gateway) -> None:
    gw = await make_gateway()
    events = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": f"w{i}"}) for i in range(5)]
    events.append(chunk({}, "stop"))
    gw.fake.script(Stream(events, delay_s=0.3))
    payload = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    t0 = time.monotonic()
    arrivals: list[float] = []
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            if line.startswith(b"data: {"):
                arrivals.append(time.monotonic() - t0)
    assert len(arrivals) == 7
    # The first content event arrives long before the upstream has finished (7 x 0.3 s).
    assert arrivals[1] < 1.2 and arrivals[-1] > 1.8


async def test_client_request_id_is_kept_and_sent_upstream(make_gateway) -> None:
    gw = await make_gateway()
    _, headers, _ = await gw.chat(headers={"x-request-id": "agent-run-42"})
    assert headers["x-request-id"] == "agent-run-42"
    assert gw.fake.chat_requests()[-1].headers["X-Request-Id"] == "agent-run-42"
    _, headers, _ = await gw.chat(headers={"x-request-id": "bad id with spaces\u00e9"})
    assert headers["x-request-id"] != "bad id with spaces\u00e9" and len(headers["x-request-id"]) == 32


async def test_the_upstream_sees_the_clients_user_agent_and_never_aiohttps(make_gateway) -> None:
    """Neither sender adds a User-Agent of its own (the aiohttp one drops aiohttp's, see
    aiohttp_sender.py: _Request); both keep aiohttp's other defaults (Accept, Accept-Encoding).
    This pins what reaches the provider, whichever client and aiohttp version."""
    gw = await make_gateway()
    await gw.chat(headers={"User-Agent": "my-agent/1.0"})
    payload = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload,
                               skip_auto_headers=["User-Agent"]) as r:  # fmt: skip
        assert r.status == 200
    with_ua, without_ua = gw.fake.chat_requests()
    assert with_ua.headers["User-Agent"] == "my-agent/1.0"
    assert "User-Agent" not in without_ua.headers
    for sent in (with_ua, without_ua):
        assert "gzip" in sent.headers["Accept-Encoding"]  # bodies reach clients decoded
        assert sent.headers["Content-Type"] == "application/json"


async def test_hop_by_hop_headers_are_not_forwarded(make_gateway) -> None:
    gw = await make_gateway()
    await gw.chat(headers={"Connection": "keep-alive, X-Hop", "X-Hop": "1", "Proxy-Authorization": "Basic x",
                           "TE": "trailers", "OpenAI-Beta": "assistants=v2"})
    seen = {k.lower() for k in gw.fake.chat_requests()[-1].headers}
    assert not seen & {"x-hop", "proxy-authorization", "te"}
    assert "openai-beta" in seen


async def test_configured_key_replaces_the_clients_and_never_leaks(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", api_key: sk-gateway-secret")
    gw.fake.script(Reply(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                         "code": "invalid_api_key"}}))
    status, headers, body = await gw.chat(headers={"Authorization": "Bearer sk-client"})
    assert gw.fake.chat_requests()[-1].headers["Authorization"] == "Bearer sk-gateway-secret"
    # The gateway's own key refused: not the client's 401 to see (docs/errors, upstream_auth).
    assert status == 502 and headers["x-llm-error-type"] == "auth"
    assert json.loads(body)["error"]["code"] == "upstream_auth"
    assert b"sk-gateway-secret" not in body and "sk-gateway-secret" not in str(dict(headers))


async def test_client_key_is_forwarded_without_a_configured_one(make_gateway) -> None:
    gw = await make_gateway()
    await gw.chat(headers={"Authorization": "Bearer sk-client"})
    assert gw.fake.chat_requests()[-1].headers["Authorization"] == "Bearer sk-client"


async def test_other_v1_paths_are_forwarded(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.get(gw.base + "/v1/models?limit=1") as r:
        assert r.status == 200 and (await r.json())["data"][0]["id"] == "gpt-4o-mini"
        assert r.headers["x-llm-attempts"] == "1"
    assert gw.fake.requests[-1].path == "/v1/models"
    async with gw.session.post(gw.base + "/v1/embeddings", json={"model": "e", "input": "x"}) as r:
        assert r.status == 200 and (await r.json())["data"][0]["embedding"] == [0.1, 0.2, 0.3]
    async with gw.session.get(gw.base + "/v1/nope") as r:
        assert r.status == 404 and r.headers["x-llm-error-type"] == "unknown"


async def test_other_methods_on_api_paths_reach_the_provider_and_its_answer_comes_back(make_gateway) -> None:
    # GET /v1/chat/completions is OpenAI's list of stored completions; DELETE there is no
    # endpoint (OpenAI: 404 "Invalid URL"). The gateway forwards both once and relays the
    # answer; the fake answers as OpenAI does rather than with a completion.
    gw = await make_gateway()
    async with gw.session.get(gw.base + "/v1/chat/completions") as r:
        assert r.status == 200 and (await r.json())["object"] == "list"
    async with gw.session.delete(gw.base + "/v1/chat/completions") as r:
        err = (await r.json())["error"]
        assert r.status == 404 and err["message"] == "Invalid URL (DELETE /v1/chat/completions)"
        assert r.headers["x-llm-error-type"] == "unknown" and r.headers["x-llm-attempts"] == "1"
    assert [(q.method, q.path) for q in gw.fake.requests] == [("GET", "/v1/chat/completions"),
                                                             ("DELETE", "/v1/chat/completions")]


async def test_a_request_naming_no_model_goes_to_the_first_upstream_speaking_its_api(make_gateway) -> None:
    """GET /v1/chat/completions (the stored completions) went to the first upstream, a
    Messages one, and was told to add 'chat' to it."""
    async with FakeUpstream() as a, FakeUpstream() as b:
        gw = await make_gateway(fake=a, upstreams=(
            f"  - {{name: claude, base_url: '{a.url}', apis: [messages], models: ['claude-*']}}\n"
            f"  - {{name: openai, base_url: '{b.url}', apis: [chat, responses]}}\n"))  # fmt: skip
        async with gw.session.get(gw.base + "/v1/chat/completions") as r:
            assert r.status == 200 and r.headers["x-llm-upstream"] == "openai"
        assert [q.path for q in b.requests] == ["/v1/chat/completions"] and not a.requests


async def test_two_upstreams_routed_by_glob(make_gateway) -> None:
    async with FakeUpstream() as a, FakeUpstream() as b:
        gw = await make_gateway(fake=a, upstreams=(
            f"  - {{name: a, base_url: '{a.url}', models: ['gpt-*']}}\n"
            f"  - {{name: b, base_url: '{b.url}', models: ['llama*']}}\n"))
        for model, fake in (("gpt-4o", a), ("llama3", b)):
            status, _, _ = await gw.chat({"model": model, "messages": [{"role": "user", "content": "hi"}]})
            assert status == 200 and len(fake.chat_requests()) == 1
        status, headers, body = await gw.chat({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"
        assert headers["x-llm-error-type"] == "unknown"


async def test_a_model_named_twice_is_refused_before_it_is_routed(make_gateway) -> None:
    """The decision docs/endpoints.md states (it was #36's to route on the last): the gateway
    reads the last of a repeated member, an upstream sent the body as it came may read the
    first, so the request is refused, sent to neither. A compactly written body is shown free
    of repeats by one re-encoding, a quarter of orjson's parse (``jsonbody.repeated_member``)."""
    async with FakeUpstream() as a, FakeUpstream() as b:
        gw = await make_gateway(fake=a, upstreams=(
            f"  - {{name: a, base_url: '{a.url}', models: ['gpt-*'], model_map: {{'gpt-*': served}}}}\n"
            f"  - {{name: b, base_url: '{b.url}', models: ['llama*']}}\n"))
        raw = b'{"model": "llama3", "messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o"}'
        status, headers, body = await gw.chat(data=raw, headers={"Content-Type": "application/json"})
        assert status == 400 and json.loads(body)["error"]["code"] == "duplicate_member"
        assert "x-llm-upstream" not in headers and a.requests == [] and b.requests == []


async def test_upstream_unreachable_is_502_classified(make_gateway) -> None:
    fake = FakeUpstream()
    fake.port = 9  # discard port: nothing listens there on loopback
    gw = await make_gateway(fake=fake, extra_yaml="retry: {provider_unavailable: {max_retries: 1, base_delay_s: 0.01, max_delay_s: 0.01}}")
    status, headers, body = await gw.chat()
    assert status == 502
    assert headers["x-llm-error-type"] == "provider_unavailable"
    assert headers["x-llm-error-retryable"] == "true"
    assert headers["x-llm-attempts"] == "2"
    assert json.loads(body)["error"]["code"] == "upstream_unreachable"


async def test_gzip_from_upstream_reaches_the_client_decoded(make_gateway) -> None:
    import gzip
    gw = await make_gateway()
    doc = {"id": "x", "object": "chat.completion", "choices": []}
    gw.fake.script(Reply(200, gzip.compress(json.dumps(doc).encode()), {"Content-Encoding": "gzip"}))
    status, headers, body = await gw.chat()
    assert status == 200 and json.loads(body) == doc and "Content-Encoding" not in headers


async def test_readyz_healthz_metrics(make_gateway) -> None:
    gw = await make_gateway()
    await gw.chat()
    for path, code in (("/healthz", 200), ("/readyz", 200)):
        async with gw.session.get(gw.base + path) as r:
            assert r.status == code
    async with gw.session.get(gw.base + "/metrics") as r:
        text = await r.text()
    assert 'llm_gateway_requests_total{error_type="none",model="gpt-4o-mini",status="200",upstream="primary"} 1.0' in text
    assert "llm_gateway_in_flight_requests 0.0" in text
    await asyncio.sleep(0)


async def test_another_method_on_an_ops_path_is_a_404_not_a_crash(make_gateway) -> None:
    # A CORS preflight or a stray POST on /healthz reached the catch-all with none of what it
    # reads set up: a KeyError, answered 500.
    gw = await make_gateway()
    for method in ("OPTIONS", "POST", "DELETE"):
        for path in ("/healthz", "/readyz", "/metrics"):
            async with gw.session.request(method, gw.base + path) as r:
                assert r.status == 404, (method, path, await r.text())
                assert (await r.json())["error"]["code"] == "not_found"
    async with gw.session.get(gw.base + "/healthz") as r:
        assert r.status == 200
    assert gw.fake.requests == []


async def test_gzip_request_body_is_decoded_before_forwarding(make_gateway) -> None:
    import gzip
    gw = await make_gateway()
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    status, _, _ = await gw.chat(data=gzip.compress(raw), headers={"Content-Encoding": "gzip",
                                                                   "Content-Type": "application/json"})
    sent = gw.fake.chat_requests()[-1]
    assert status == 200 and sent.body == raw and "Content-Encoding" not in sent.headers


async def test_models_from_every_upstream_are_merged_each_listed_once(make_gateway) -> None:
    from tests.fakeupstream import FakeUpstream

    primary, other = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=primary, upstreams=(
            f"  - {{name: primary, base_url: '{primary.url}', models: ['gpt-*']}}\n"
            f"  - {{name: claude, base_url: '{other.url}', models: ['claude-*', 'gpt-4o-mini']}}\n"))
        primary.models_listing = {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"},
                                                             {"id": "gpt-4.1", "object": "model"}]}
        # Listed by both; routing sends gpt-4o-mini to primary, so it is listed once, from there.
        other.models_listing = {"data": [{"id": "claude-sonnet-4-5", "type": "model"},
                                         {"id": "gpt-4o-mini", "type": "model"}], "has_more": False}
        async with gw.session.get(gw.base + "/v1/models") as r:
            doc = await r.json()
        assert r.status == 200 and doc["object"] == "list"
        assert [m["id"] for m in doc["data"]] == ["gpt-4o-mini", "gpt-4.1", "claude-sonnet-4-5"]
        assert doc["data"][2] == {"id": "claude-sonnet-4-5", "object": "model", "created": 0, "owned_by": "claude"}
        async with gw.session.get(gw.base + "/v1/models") as r:
            assert (await r.json()) == doc  # from the short cache: no second round of calls
        assert len([q for q in other.requests if q.path.endswith("/models")]) == 1
    finally:
        await primary.close()
        await other.close()


# The example answer of Anthropic's Models API reference (docs.claude.com/en/api/models-list).
ANTHROPIC_MODELS = {"data": [{"created_at": "2025-02-19T00:00:00Z", "display_name": "Claude 3.7 Sonnet",
                              "id": "claude-3-7-sonnet-20250219", "type": "model"}],
                    "first_id": "claude-3-7-sonnet-20250219", "has_more": False,
                    "last_id": "claude-3-7-sonnet-20250219"}  # fmt: skip


async def test_an_anthropic_client_gets_the_model_list_in_anthropics_shape(make_gateway) -> None:
    """What Claude Code's model discovery sends (CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1,
    read from Claude Code 2.1.197's bundle), here to an upstream answering in OpenAI's shape."""
    import anthropic

    gw = await make_gateway()
    async with gw.session.get(gw.base + "/v1/models?limit=1000", headers={
            "anthropic-version": "2023-06-01", "Authorization": "Bearer dummy"}) as r:  # fmt: skip
        assert r.status == 200 and r.headers["x-llm-upstream"] == "primary"
        doc = await r.json()
    assert doc == {"data": [{"type": "model", "id": "gpt-4o-mini", "display_name": "gpt-4o-mini",
                             "created_at": "1970-01-01T00:00:00Z"}],  # the fake's created: 0
                   "has_more": False, "first_id": "gpt-4o-mini", "last_id": "gpt-4o-mini"}  # fmt: skip
    assert gw.fake.requests[-1].query == "limit=1000"
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    page = await client.models.list()
    assert [(m.type, m.id, m.created_at.year) for m in page.data] == [("model", "gpt-4o-mini", 1970)]
    await client.close()


async def test_an_openai_client_gets_an_anthropic_upstreams_list_in_openais_shape(make_gateway) -> None:
    import openai

    gw = await make_gateway()
    gw.fake.models_listing = ANTHROPIC_MODELS
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    [model] = [m async for m in client.models.list()]
    await client.close()
    assert (model.id, model.object, model.created, model.owned_by) == (
        "claude-3-7-sonnet-20250219", "model", 1739923200, "primary")  # owned_by: the upstream serving it
    async with gw.session.get(gw.base + "/v1/models", headers={"anthropic-version": "2023-06-01"}) as r:
        assert await r.json() == ANTHROPIC_MODELS  # in its own shape: as it came


async def test_model_not_found_names_the_model_and_the_patterns(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", models: ['gpt-*', 'o3']")
    status, headers, body = await gw.chat({"model": "llama-3", "messages": [{"role": "user", "content": "x"}]})
    err = json.loads(body)["error"]
    assert status == 404 and err["code"] == "model_not_found"
    assert "'llama-3'" in err["message"] and "gpt-*" in err["message"] and "o3" in err["message"]


async def test_configured_headers_reach_the_upstream_over_the_clients_native_and_translated(make_gateway) -> None:
    """upstreams[].headers: on every request, replacing a client's header of the same name
    (any case), and over what a translation writes (the Messages API's anthropic-version);
    anthropic-beta, a list, joins the client's."""
    gw = await make_gateway(upstream_yaml=", apis: [chat, messages], headers: {anthropic-beta: cfg-beta, X-Title: my-app, "
                                          "HTTP-Referer: '', anthropic-version: '2023-01-01'}")  # fmt: skip
    await gw.chat(headers={"Anthropic-Beta": "client-beta", "X-Title": "client", "HTTP-Referer": "https://client"})
    sent = gw.fake.chat_requests()[-1].headers
    assert sent.getall("anthropic-beta") == ["client-beta,cfg-beta"]  # a list: the config's betas join
    assert sent.getall("x-title") == ["my-app"]
    assert sent.getall("http-referer") == ["https://client"]  # an empty value is not sent: the client's goes
    payload = {"model": "claude-x", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    async with gw.session.post(gw.base + "/v1/messages", json=payload,
                               headers={"anthropic-version": "2023-06-01", "anthropic-beta": "b"}) as r:  # fmt: skip
        assert r.status == 200, await r.text()
    sent = gw.fake.messages_requests()[-1].headers
    assert sent.getall("anthropic-version") == ["2023-01-01"] and sent.getall("anthropic-beta") == ["b,cfg-beta"]
