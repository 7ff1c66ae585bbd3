"""A path the gateway passes through names the model by the upstream's ``model_map`` too: Claude
Code's ``/v1/messages/count_tokens`` before a compaction went out under the client's model while
its ``/v1/messages`` went out under the mapped one, a count for a model never asked, or a 404
where the upstream does not know the client's name (audit with the real agents, 2026-11-30)."""

from __future__ import annotations

import json

import anthropic


async def test_count_tokens_asks_the_upstream_for_the_mapped_model(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway(upstream_yaml=", apis: [messages], api_key: sk-ant-x, key_header: x-api-key, "
                                          "model_map: {'claude-opus-*': claude-sonnet-4-5}")  # fmt: skip
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "hello there"}]
    await client.messages.count_tokens(model="claude-opus-5-5", messages=messages)  # type: ignore[arg-type]
    await client.messages.count_tokens(model="claude-haiku-4-5", messages=messages)  # type: ignore[arg-type]
    await client.close()
    sent = [(r.path, json.loads(r.body)) for r in gw.fake.requests]
    assert [(path, doc["model"]) for path, doc in sent] == [
        ("/v1/messages/count_tokens", "claude-sonnet-4-5"), ("/v1/messages/count_tokens", "claude-haiku-4-5")]
    assert sent[0][1]["messages"] == messages


async def test_a_form_body_is_sent_as_it_came(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway(upstream_yaml=", model_map: {'whisper-*': whisper-large}")
    form = b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n--b--\r\n'
    async with gw.session.post(gw.base + "/v1/audio/transcriptions", data=form,
                               headers={"Content-Type": "multipart/form-data; boundary=b"}) as r:
        await r.read()
    [seen] = gw.fake.requests
    assert seen.body == form


async def test_an_embedding_keeps_its_model_under_a_map_of_chat_models(make_gateway) -> None:  # type: ignore[no-untyped-def]
    # Review: the shipped config maps "*" to the served chat model; an embedding, a moderation or
    # speech asked under it would have named the chat model.
    gw = await make_gateway(upstream_yaml=", model_map: {'*': gpt-4o-mini}")
    for path, model in (("/v1/embeddings", "text-embedding-3-small"), ("/v1/moderations", "omni-moderation-latest")):
        async with gw.session.post(gw.base + path, json={"model": model, "input": "hi"}) as r:
            await r.read()
    assert [json.loads(r.body)["model"] for r in gw.fake.requests] == ["text-embedding-3-small",
                                                                       "omni-moderation-latest"]

