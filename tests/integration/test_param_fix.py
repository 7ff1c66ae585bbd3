"""A parameter the model does not take: left out (or renamed) once after the refusal, then before
every send to that (upstream, model). Claude Code's own first request on a chat upstream that
refuses as gpt-4o does: its effort (``reasoning_effort``) and its 64000-token budget."""

import json
from pathlib import Path
from typing import Any

from gateway.fake.steps import Reply

CORPUS = Path(__file__).parent.parent / "corpus" / "requests"
HI = [{"role": "user", "content": "hi"}]


def claude_code_first() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CORPUS / "claude-code-2.1.197-first.json").read_text())["body"]
    return {**doc, "stream": False}


async def test_claude_code_on_a_gpt_4o_like_upstream_needs_three_calls_once_then_one(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.refused_params = frozenset({"reasoning_effort"})
    gw.fake.output_limit = 16384
    status, headers, body = await gw.messages(claude_code_first())
    assert status == 200, body
    assert headers["x-llm-attempts"] == "3"
    assert headers["x-llm-params-dropped"] == "reasoning_effort" and headers["x-llm-output-capped"] == "16384"
    sent = [r.json() for r in gw.fake.chat_requests()]
    assert [("reasoning_effort" in s, s["max_tokens"]) for s in sent] == [(True, 64000), (False, 64000),
                                                                          (False, 16384)]  # fmt: skip
    status, headers, _ = await gw.messages(claude_code_first())
    assert status == 200 and headers["x-llm-attempts"] == "1"
    assert headers["x-llm-params-dropped"] == "reasoning_effort"
    last = gw.fake.chat_requests()[-1].json()
    assert "reasoning_effort" not in last and last["max_tokens"] == 16384


async def test_a_reasoning_models_max_tokens_is_carried_as_max_completion_tokens(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.refused_params = frozenset({"max_tokens"})
    payload = {"model": "o3", "max_tokens": 500, "temperature": 1, "messages": HI}
    status, headers, _ = await gw.chat(payload)
    assert status == 200 and headers["x-llm-params-dropped"] == "max_tokens->max_completion_tokens"
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert first["max_tokens"] == 500 and "max_completion_tokens" not in first
    assert "max_tokens" not in second and second["max_completion_tokens"] == 500 and second["temperature"] == 1
    status, headers, _ = await gw.chat(payload)
    assert status == 200 and headers["x-llm-attempts"] == "1"


async def test_a_native_messages_request_loses_a_deprecated_sampling_knob(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.refused_params = frozenset({"temperature"})
    payload = {"model": "claude-opus-4-8", "max_tokens": 100, "temperature": 0.2, "messages": HI}
    status, headers, _ = await gw.messages(payload)
    assert status == 200 and headers["x-llm-params-dropped"] == "temperature"
    first, second = (r.json() for r in gw.fake.messages_requests())
    assert first["temperature"] == 0.2 and "temperature" not in second
    assert {k: v for k, v in first.items() if k != "temperature"} == second


async def test_temperature_and_top_p_together_on_sonnet_4_5_go_on_without_top_p(make_gateway) -> None:
    """Anthropic's own answer (the fake's rule, not a scripted refusal): "`temperature` and `top_p`
    cannot both be specified for this model. Please use only one." (opencommit #520)."""
    gw = await make_gateway()
    payload = {"model": "claude-sonnet-4-5", "max_tokens": 100, "temperature": 0.2, "top_p": 0.9, "messages": HI}
    status, headers, body = await gw.messages(payload)
    assert status == 200, body
    assert headers["x-llm-params-dropped"] == "top_p"
    first, second = (r.json() for r in gw.fake.messages_requests())
    assert first == payload and second == {k: v for k, v in payload.items() if k != "top_p"}


async def test_a_forced_tool_choice_claude_fable_5_1_refuses_goes_as_auto_once_learnt(make_gateway) -> None:
    """Anthropic's own answer (the fake's rule): 'tool_choice: type "tool" and "any" are not
    supported for this model.' (inspect_ai #5176). A native Messages request is sent as the client
    wrote it; the refusal is learnt, and that model is asked with `auto` after it, the tools
    narrowed to the one named."""
    gw = await make_gateway()
    tools = [{"name": "weather", "input_schema": {"type": "object"}}, {"name": "news", "input_schema": {"type": "object"}}]
    payload = {"model": "claude-fable-5-1", "max_tokens": 100, "messages": HI, "tools": tools,
               "tool_choice": {"type": "tool", "name": "news", "disable_parallel_tool_use": True}}  # fmt: skip
    status, headers, body = await gw.messages(payload)
    assert status == 200, body
    assert headers["x-llm-params-dropped"] == "tool_choice=auto" and headers["x-llm-attempts"] == "2"
    first, second = (r.json() for r in gw.fake.messages_requests())
    assert first == payload
    assert second == {**payload, "tools": tools[1:], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    status, headers, _ = await gw.messages({**payload, "tool_choice": {"type": "any"}})
    assert status == 200 and headers["x-llm-attempts"] == "1" and headers["x-llm-params-dropped"] == "tool_choice=auto"
    assert gw.fake.messages_requests()[-1].json()["tool_choice"] == {"type": "auto"}


async def test_a_parameter_that_carries_meaning_is_never_left_out(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.refused_params = frozenset({"response_format"})
    payload = {"model": "gpt-4o", "response_format": {"type": "json_object"}, "messages": HI}
    status, headers, body = await gw.chat(payload)
    assert status == 400 and headers["x-llm-error-type"] == "unknown" and headers["x-llm-attempts"] == "1"
    assert b"Unrecognized request argument supplied: response_format" in body
    assert "x-llm-params-dropped" not in headers and len(gw.fake.chat_requests()) == 1


async def test_a_budget_lowered_first_stays_lowered_when_a_parameter_is_refused_after_it(make_gateway) -> None:
    gw = await make_gateway()
    too_large = ("max_tokens is too large: 64000. This model supports at most 16384 completion tokens, "
                 "whereas you provided 64000.")  # fmt: skip
    gw.fake.script(
        Reply(400, {"error": {"message": too_large, "type": "invalid_request_error", "param": "max_tokens",
                              "code": "invalid_value"}}),
        Reply(400, {"error": {"message": "Unrecognized request argument supplied: reasoning_effort",
                              "type": "invalid_request_error", "param": None, "code": None}}),
    )  # fmt: skip
    payload = {"model": "gpt-4o", "max_tokens": 64000, "reasoning_effort": "high", "messages": HI}
    status, headers, _ = await gw.chat(payload)
    assert status == 200 and headers["x-llm-attempts"] == "3"
    sent = [r.json() for r in gw.fake.chat_requests()]
    assert [(s["max_tokens"], "reasoning_effort" in s) for s in sent] == [(64000, True), (16384, True),
                                                                          (16384, False)]  # fmt: skip


async def test_the_same_refusal_twice_is_answered(make_gateway) -> None:
    gw = await make_gateway()
    refusal = Reply(400, {"error": {"message": "Unrecognized request argument supplied: seed",
                                    "type": "invalid_request_error", "param": None, "code": None}})  # fmt: skip
    gw.fake.always = refusal  # refuses whatever it is sent
    status, headers, _ = await gw.chat({"model": "gpt-4o", "seed": 7, "messages": HI})
    assert status == 400 and headers["x-llm-attempts"] == "2" and len(gw.fake.chat_requests()) == 2


async def test_the_same_refusal_of_an_adapted_effort_twice_is_answered(make_gateway) -> None:
    """An adapted value is told as what was asked and sent (``low->medium``), which is not the
    fix's own label: the guard goes by the label, so the second refusal is answered."""
    gw = await make_gateway()
    gw.fake.always = Reply(400, {"error": {
        "message": "Unsupported value: 'reasoning_effort' does not support 'low' with this model. "
                   "Supported values are: 'medium'.",
        "type": "invalid_request_error", "param": "reasoning_effort", "code": "unsupported_value"}})  # fmt: skip
    status, headers, _ = await gw.chat({"model": "gpt-4o", "reasoning_effort": "low", "messages": HI})
    assert status == 400 and headers["x-llm-attempts"] == "2"
    assert [r.json()["reasoning_effort"] for r in gw.fake.chat_requests()] == ["low", "medium"]
    assert headers["x-llm-params-dropped"] == "reasoning_effort=low->medium"


# Mistral's 422 for a field it does not take (editor-code-assistant/eca#231, verbatim; in
# tests/corpus/hosted_more.json): a validation error, not a sentence.
MISTRAL_EXTRA = {"object": "error", "message": {"detail": [{
    "type": "extra_forbidden", "loc": ["body", "max_completion_tokens"], "msg": "Extra inputs are not permitted",
    "input": 32000}]}, "type": "invalid_request_error", "param": None, "code": None}  # fmt: skip


async def test_mistrals_validation_error_names_the_field_to_carry_under_its_other_name(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(lambda p: Reply(422, MISTRAL_EXTRA) if "max_completion_tokens" in p else None)
    payload = {"model": "devstral-small", "max_completion_tokens": 32000, "messages": HI}
    status, headers, _ = await gw.chat(payload)
    assert status == 200 and headers["x-llm-params-dropped"] == "max_completion_tokens->max_tokens"
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert first["max_completion_tokens"] == 32000 and "max_tokens" not in first
    assert second["max_tokens"] == 32000 and "max_completion_tokens" not in second


async def test_a_validation_error_about_a_messages_field_reaches_the_client_as_it_came(make_gateway) -> None:
    gw = await make_gateway()
    # Mistral refusing a message's fields (nomtek/mistralai_client_dart#44, verbatim in the corpus).
    refusal = {"object": "error", "message": {"detail": [{
        "type": "extra_forbidden", "loc": ["body", "messages", 0, "user", "name"],
        "msg": "Extra inputs are not permitted", "input": None}]}, "type": "invalid_request_error",
        "param": None, "code": None}  # fmt: skip
    gw.fake.script(Reply(422, refusal))
    status, headers, body = await gw.chat({"model": "mistral-small", "seed": 7, "messages": HI})
    assert status == 422 and json.loads(body) == refusal
    assert "x-llm-params-dropped" not in headers and len(gw.fake.chat_requests()) == 1


async def test_groqs_refusal_of_the_effort_claude_code_sends(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    # Groq's words for it (CherryHQ/cherry-studio#1099); its body shape as in fanenr/chatbot#21.
    message = "property 'reasoning_effort' is unsupported, did you mean 'reasoning_format'?"
    gw.fake.script(lambda p: Reply(400, {"error": {"message": message, "type": "invalid_request_error"}})
                   if "reasoning_effort" in p else None)  # fmt: skip
    payload = {"model": "llama-3.3-70b-versatile", "max_tokens": 100, "messages": HI,
               "output_config": {"effort": "high"}}  # fmt: skip
    status, headers, _ = await gw.messages(payload)
    assert status == 200 and headers["x-llm-params-dropped"] == "reasoning_effort"
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert first["reasoning_effort"] == "high" and "reasoning_effort" not in second


async def test_a_stream_whose_usage_option_a_strict_server_refuses_streams_without_it(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.refused_params = frozenset({"stream_options"})
    gw.fake.refusal_style = "mistral"  # a pydantic schema's 422, as vLLM behind GPUStack answered
    payload = {"model": "gpt-4o-mini", "stream": True, "messages": HI}  # the gateway asks for usage
    status, headers, body = await gw.chat(payload)
    assert status == 200 and headers["x-llm-params-dropped"] == "stream_options"
    assert b"data: [DONE]" in body
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert first["stream_options"] == {"include_usage": True} and "stream_options" not in second
    status, headers, _ = await gw.chat(payload)
    assert status == 200 and headers["x-llm-attempts"] == "1"


async def test_a_default_n_a_strict_server_refuses_is_left_out_and_two_answers_are_not(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.refused_params = frozenset({"n"})
    gw.fake.refusal_style = "mistral"  # crewAIInc/crewAI#60: Mistral's 422 for LangChain's n: 1
    status, headers, _ = await gw.chat({"model": "mistral-small", "n": 1, "messages": HI})
    assert status == 200 and headers["x-llm-params-dropped"] == "n"
    status, headers, _ = await gw.chat({"model": "mistral-small", "n": 2, "messages": HI})
    assert status == 422 and "x-llm-params-dropped" not in headers
    sent = [r.json().get("n") for r in gw.fake.chat_requests()]
    assert sent == [1, None, 2]  # the learned fix does not apply to n: 2, which goes as asked


async def test_claude_codes_thinking_on_a_gemini_model_without_it_is_left_out_once_learnt(make_gateway) -> None:
    """Gemini 2.0 answers "thinking_config is not supported." (immersive-translate #2976) to the
    thinkingConfig Claude Code's thinking becomes: every turn failed; now once, then never."""
    gw = await make_gateway(upstream_yaml=", apis: [gemini], api_key: k-gemini, model_map: {'claude-*': gemini-2.0-flash}")
    refusal = {"error": {"code": 400, "message": "thinking_config is not supported.", "status": "INVALID_ARGUMENT"}}
    gw.fake.script(Reply(400, refusal))
    status, headers, body = await gw.messages(claude_code_first())
    assert status == 200, body
    assert headers["x-llm-attempts"] == "2" and headers["x-llm-params-dropped"] == "thinking_config"
    sent = [r.json() for r in gw.fake.requests]
    assert "thinkingConfig" in sent[0]["generationConfig"] and "thinkingConfig" not in sent[1]["generationConfig"]
    status, headers, _ = await gw.messages(claude_code_first())
    assert status == 200 and headers["x-llm-attempts"] == "1"
    assert "thinkingConfig" not in gw.fake.requests[-1].json()["generationConfig"]


async def test_a_chat_clients_penalties_on_gemini_2_5_are_left_out_once_learnt(make_gateway) -> None:
    """The openai SDK's knobs (a real request: presence 0.5, frequency 0.25) become Gemini's
    penalties, which Gemini 2.5 refuses ("Penalty is not enabled for models/gemini-2.5-flash",
    vercel/ai#8943): every request failed; now both go once, then before every send."""
    gw = await make_gateway(upstream_yaml=", apis: [gemini], api_key: k-gemini, model_map: {'gpt-*': gemini-2.5-flash}")
    knobs = json.loads((CORPUS / "chat-openai-python-stream-knobs.json").read_text())["body"]
    status, headers, body = await gw.chat(knobs)
    assert status == 200 and b"data: [DONE]" in body, body
    assert headers["x-llm-attempts"] == "2" and headers["x-llm-params-dropped"] == "penalty"
    first, second = (r.json()["generationConfig"] for r in gw.fake.gemini_requests())
    assert (first["presencePenalty"], first["frequencyPenalty"]) == (0.5, 0.25)
    assert second == {k: v for k, v in first.items() if not k.endswith("Penalty")} and second["temperature"] == 1.5
    status, headers, _ = await gw.chat(knobs)
    assert status == 200 and headers["x-llm-attempts"] == "1" and headers["x-llm-params-dropped"] == "penalty"


async def test_a_gemini_clients_sampling_settings_on_gpt_5_cost_one_refusal_not_four(make_gateway) -> None:
    """google-genai's request with ordinary settings (temperature 0.2, topP, maxOutputTokens,
    stopSequences; the corpus's) on a chat upstream mapped to gpt-5, which refuses each of them
    as OpenAI does (the fake's rules): one refusal shows a reasoning model, and every setting
    such a model refuses is left out at once; the next request is sent without them."""
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'*': gpt-5}")
    body = json.loads((CORPUS / "genai-3.6-knobs-image.json").read_text())["body"]
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    async with gw.session.post(gw.base + path, json=body, headers={"x-goog-api-key": "dummy"}) as r:
        status, headers, answer = r.status, r.headers, await r.read()
    assert status == 200, answer
    assert headers["x-llm-attempts"] == "2"
    assert headers["x-llm-params-dropped"] == "max_tokens->max_completion_tokens,temperature,top_p,stop"
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert (first["temperature"], first["top_p"], first["max_tokens"], first["stop"]) == (0.2, 0.9, 256, ["END"])
    assert second["max_completion_tokens"] == 256
    assert not {"temperature", "top_p", "max_tokens", "stop"} & second.keys()
    async with gw.session.post(gw.base + path, json=body, headers={"x-goog-api-key": "dummy"}) as r:
        assert r.status == 200 and r.headers["x-llm-attempts"] == "1"
    assert len(gw.fake.chat_requests()) == 3


async def test_a_reasoning_models_refusal_of_a_penalty_leaves_its_other_settings_out_too(make_gateway) -> None:
    """The OpenAI SDK's request with sampling settings (the corpus's) to o1, which refuses its
    penalties as it refuses temperature ("Unsupported parameter: 'frequency_penalty' is not
    supported with this model.", lobehub/lobehub#5053)."""
    gw = await make_gateway()
    doc = json.loads((CORPUS / "chat-openai-python-stream-knobs.json").read_text())["body"]
    payload = {**doc, "model": "o1"}
    status, headers, body = await gw.chat(payload)
    assert status == 200, body
    assert headers["x-llm-attempts"] == "2"
    second = gw.fake.chat_requests()[1].json()
    assert not {"temperature", "top_p", "presence_penalty", "frequency_penalty", "max_tokens"} & second.keys()


def _corpus_body(name: str) -> dict[str, Any]:
    cases = json.loads((CORPUS.parent / "openai.json").read_text())["cases"]
    body: dict[str, Any] = next(c["body"] for c in cases if c["name"] == name)
    return body


async def test_claude_codes_effort_on_gpt_5_pro_goes_as_the_one_it_takes_once_learnt(make_gateway) -> None:
    """Claude Code's effort ("medium") reaches a Responses-only -pro model as ``reasoning.effort``,
    which gpt-5-pro refuses, listing the one it takes ("Supported values are: 'high'."): every
    turn failed; now the second call of the first turn, and every turn after it, asks for high."""
    gw = await make_gateway(upstream_yaml=", apis: [responses], model_map: {'claude-*': gpt-5-pro}")
    refusal = _corpus_body("openai-400-gpt-5-pro-reasoning-effort-medium-unsupported-value")
    gw.fake.script(lambda p: Reply(400, refusal) if p.get("reasoning", {}).get("effort") != "high" else None)
    first = json.loads((CORPUS / "claude-code-2.1.332-first.json").read_text())["body"]
    status, headers, body = await gw.messages({**first, "stream": False})
    assert status == 200, body
    assert headers["x-llm-attempts"] == "2" and headers["x-llm-params-dropped"] == "reasoning.effort=medium->high"
    sent = [r.json()["reasoning"] for r in gw.fake.responses_requests()]
    assert [s["effort"] for s in sent] == ["medium", "high"]
    assert {k: v for k, v in sent[0].items() if k != "effort"} == {k: v for k, v in sent[1].items() if k != "effort"}
    status, headers, _ = await gw.messages({**first, "stream": False})
    assert status == 200 and headers["x-llm-attempts"] == "1"
    assert gw.fake.responses_requests()[-1].json()["reasoning"]["effort"] == "high"


async def test_a_chat_models_refused_effort_goes_as_the_nearest_it_lists(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    refusal = _corpus_body("openai-400-gpt-5.2-chat-reasoning-effort-high-unsupported-value")
    gw.fake.script(lambda p: Reply(400, refusal) if p.get("reasoning_effort", "medium") != "medium" else None)
    payload = {"model": "gpt-5.2-chat-latest", "reasoning_effort": "high", "messages": HI}
    status, headers, _ = await gw.chat(payload)
    assert status == 200 and headers["x-llm-params-dropped"] == "reasoning_effort=high->medium"
    status, headers, _ = await gw.chat({**payload, "reasoning_effort": "low"})
    assert status == 200 and headers["x-llm-attempts"] == "1"
    assert [r.json()["reasoning_effort"] for r in gw.fake.chat_requests()] == ["high", "medium", "medium"]


async def test_a_top_k_above_what_a_gemini_model_takes_goes_as_its_highest_once_learnt(make_gateway) -> None:
    """Gemini CLI sends topK 64 (its real first request); gemini-1.5-flash and 2.0 take topK
    below 41 and refuse more ("Unable to submit request because it has a topK value of 50 but the
    supported range is from 1 (inclusive) to 41 (exclusive)...", genkit-ai/genkit#1397): the
    request failed; now it goes once more with topK 40, and every later one so."""
    gw = await make_gateway(upstream_yaml=", apis: [gemini], api_key: k-gemini, model_map: {'*': gemini-2.0-flash}")
    cases = json.loads((CORPUS.parent / "google.json").read_text())["cases"]
    refusal = next(c["body"] for c in cases if c["name"] == "gemini-1.5-flash-400-top-k-out-of-range")
    gw.fake.script(lambda p: Reply(400, refusal) if p.get("generationConfig", {}).get("topK", 0) > 40 else None)
    cli = json.loads((CORPUS / "gemini-cli-0.61-first.json").read_text())["body"]
    for attempts in ("2", "1"):
        async with gw.session.post(gw.base + "/v1beta/models/gemini-2.0-flash:generateContent", json=cli) as r:
            assert r.status == 200, await r.text()
            assert r.headers["x-llm-attempts"] == attempts and r.headers["x-llm-params-dropped"] == "top_k=64->40"
    sent = [r.json()["generationConfig"] for r in gw.fake.gemini_requests()]
    assert [g["topK"] for g in sent] == [64, 40, 40]
    assert {k: v for k, v in sent[0].items() if k != "topK"} == {k: v for k, v in sent[1].items() if k != "topK"}


async def test_the_same_refusal_of_a_lowered_top_k_twice_is_answered(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [gemini], api_key: k-gemini, model_map: {'*': gemini-2.0-flash}")
    cases = json.loads((CORPUS.parent / "google.json").read_text())["cases"]
    gw.fake.always = Reply(400, next(c["body"] for c in cases if c["name"] == "gemini-1.5-flash-400-top-k-out-of-range"))
    cli = json.loads((CORPUS / "gemini-cli-0.61-first.json").read_text())["body"]
    async with gw.session.post(gw.base + "/v1beta/models/gemini-2.0-flash:generateContent", json=cli) as r:
        assert r.status == 400 and r.headers["x-llm-attempts"] == "2"
    assert [r.json()["generationConfig"]["topK"] for r in gw.fake.gemini_requests()] == [64, 40]
