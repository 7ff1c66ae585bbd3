"""What the Gemini API refuses in a request body, refused the same way by the fake: pure.

* A field GenerateContentRequest does not have (``model``, ``stream``, ``messages``…): 400
  INVALID_ARGUMENT 'Invalid JSON payload received. Unknown name "model": Cannot find field.'
  with a BadRequest fieldViolation, as quoted in Alishahryar1/free-claude-code#542. The model
  is in the path; the body's fields are those of https://ai.google.dev/api/generate-content,
  under their JSON (camelCase) or proto (snake_case) names, which Google accepts alike.
* Fields out of bounds, each a line "* GenerateContentRequest.FIELD: WHY\n", every one the
  request has in one message, as Google lists them (here in the order contents, tools,
  tool_config, generation_config):

  - no ``contents``: "* GenerateContentRequest.contents: contents is not specified\n"
    (ikechan8370/chatgpt-plugin#733; Gemini clients' own tests stub it with these words);
  - a Content with no parts: "* GenerateContentRequest.contents[N].parts: contents.parts must
    not be empty.\n" (egoist/chatwise-releases#250, QuantumNous/new-api#1060);
  - a function declaration's name that does not start with a letter or an underscore, has a
    character other than a-z, A-Z, 0-9, ``_ . : -`` or is longer than 64:
    "* GenerateContentRequest.tools[I].function_declarations[J].name: Invalid function name.
    Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores
    (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.\n", a line for each
    (google-gemini/gemini-cli#9535, maximhq/bifrost#1979; gemini-cli#7869 and #2966 quote the
    older wording, from before colons were allowed). Declarations only: no report shows a
    ``functionCall`` name in the history refused;
  - ``toolConfig.functionCallingConfig.allowedFunctionNames`` with a mode other than ANY or
    VALIDATED (none is AUTO): "* GenerateContentRequest.tool_config.function_calling_config.
    allowed_function_names: allowed_function_names should only be set when the Mode is ANY or
    VALIDATED.\n", the fake's own words: no report quotes Google's. The rule is the v1beta
    proto's ("This should only be set when the Mode is ANY or VALIDATED", as published in
    https://pub.dev/documentation/google_cloud_ai_generativelanguage_v1beta/latest/generativelanguage/FunctionCallingConfig/allowedFunctionNames.html;
    ANY alone before VALIDATED came), and clients switch to ANY when they send the names "to
    prevent errors" (tensorzero/tensorzero#4875);
  - more than 5 ``generationConfig.stopSequences``: "* GenerateContentRequest.generation_config.
    stop_sequences: the number of stop_sequences must not exceed 5.\n" (BerriAI/litellm#18921;
    continuedev/continue#2702 quotes it in its title).
* A Content whose role is not one Gemini takes: "Please use a valid role: user, model."
  (dreeveapp/dreeve#894; "system" in thomwebb/gac#47, "phase" in lijunzh/koda#312). No role is
  taken (Content.role is optional, and one-turn requests leave it out), and so are "function"
  and "tool", which Google's own examples sent function responses under (the function-calling
  guide's, quoted in spring-projects/spring-ai#866; google-genai's README, ``role='tool'``).
* ``inlineData`` of an image type Gemini does not read: "Unsupported MIME type: image/gif"
  (worded as quoted for image/jpg, the name Google refuses for JPEG, in
  ogkalu2/comic-translate#399; Mai-with-u/MaiBot#1435 reports it for image/gif). Gemini reads
  image/png, image/jpeg, image/webp, image/heic and image/heif
  (https://ai.google.dev/gemini-api/docs/image-understanding); PDFs, audio, video and text
  are not held to this rule.
* A turn of ``functionResponse`` parts that does not come right after a turn of
  ``functionCall`` parts: "Please ensure that function response turn comes immediately after a
  function call turn." (langchain-ai/langchain#27799); as many responses as calls, else
  "Please ensure that the number of function response parts is equal to the number of
  function call parts of the function call turn." (google-gemini/gemini-cli#4504). The same
  words refuse a call turn followed by a turn with fewer (or no) responses, the calls left
  "orphaned": "Gemini models strictly require a 1:1 pairing between function_call and
  function_response messages. ... "message": "Please ensure that the number of function response
  parts is equal to the number of function call parts of the function call turn.", "status":
  "INVALID_ARGUMENT"" (https://github.com/microsoft/vscode/issues/299295, the tool results
  pruned from a conversation; fixed by stripping the calls in microsoft/vscode-copilot-chat#4628).
  A call turn that is the last of ``contents`` is not judged (nothing has answered it yet, and
  no report shows one refused), nor one followed by another model turn (no report either).
* A call the fake answered with (its ``id`` is known) replayed without its
  ``thoughtSignature``: Gemini 3's 400 "Function call is missing a thought_signature in
  functionCall parts. …, function call `default_api:NAME` , position N. …" (worded as quoted in
  manthanabc/paws#103 and csells/dartantic#86). Which position the API counts is not
  documented; here it is the 1-based index of the content holding the call, which gives the
  "position 2" those reports show for a [user, model call, function response] conversation.
  Any signature is accepted, placeholders too (Gemini CLI replays calls with
  ``skip_thought_signature_validator``, which Google's thought-signatures page allows), but one
  the fake sealed for a key of another organization (``signed_for``, ``FakeUpstream.orgs``):
  signatures are bound to the account (sub2api #393: "thoughtSignature 与上游账号强绑定"), refused
  with 400 INVALID_ARGUMENT "Corrupted thought signature." (proxypal #119, gemini-cli #13467).
* JSON mode (``generationConfig.responseMimeType: application/json``) beside function
  declarations, on a Gemini 1.x or 2.x model: "Function calling with a response mime type:
  'application/json' is unsupported" (the whole body quoted in
  google-gemini/deprecated-generative-ai-swift#195; gemini-2.5-flash in symfony/ai#1777,
  gemini-2.5-flash-lite in analyticalrohit/ai-blog-generator#17, gemini-2.5-pro in
  google/adk-python#5735, which also reports it taken with function calling off, mode NONE).
  Gemini 3 takes both ("Structured Outputs with tools", the Gemini 3 developer guide,
  https://ai.google.dev/gemini-api/docs/gemini-3; simstudioai/sim#4184 sends both to Gemini 3 only).
  The model is the one in the URL.
* A (sub)schema of a function's ``parametersJsonSchema`` or of ``responseJsonSchema`` with
  ``$ref`` and a field other than ``description``, ``default`` or one starting with ``$`` (a
  ``title``, ``examples``, a ``type``: what pydantic writes for an MCP tool's nested model):
  "$ref 'QuestionOption' was set alongside unsupported fields. If a schema node has $ref set,
  then only description and default can be set alongside it", named by the reference's last
  segment (as quoted in anomalyco/opencode#12295; Google's Code Assist API says "Schema.ref"
  and goes on "; other fields they would be replaced by the expanded reference.",
  diegosouzapw/OmniRoute#461). Google's responseJsonSchema reference: "If $ref is set on a
  sub-schema, no other properties, except for than those starting as a $, may be set."
* A non-zero ``presencePenalty`` or ``frequencyPenalty`` on a Gemini 2.5 model: "Penalty is
  not enabled for models/gemini-2.5-flash" (vercel/ai#8943 for gemini-2.5-flash and -pro,
  BerriAI/litellm#32273; the envelope, 400 INVALID_ARGUMENT, as PublicAffairs/openai-gemini#63
  quotes it). Zero, the default, is taken ("0.0 is a no-op value that isn't validated
  server-side", google-gemini/cookbook#1290); Gemini 2.0 takes penalties (vercel/ai#8943).

* A function's ``parameters`` (Google's Schema, an OpenAPI 3.0 subset, not JSON Schema) with a
  field that Schema does not have, at any depth: JSON Schema's ``additionalProperties``,
  ``$schema``, ``const``, ``propertyNames``... Each is a line 'Invalid JSON payload received.
  Unknown name "additionalProperties" at 'tools[0].function_declarations[1].parameters.
  properties[0].value.items': Cannot find field.' with a BadRequest fieldViolation naming the
  path (a map's entries by position, ``properties[N].value``; ``any_of[N]``), every one in one
  message (openswarm-ai/openswarm#24 for ``$schema`` and ``additionalProperties`` from Gemini
  3.1 Pro, router-for-me/CLIProxyAPI#97 for ``$schema`` from 2.5 Flash, zed-industries/zed#44875
  for ``const`` under ``any_of``, musistudio/claude-code-router#187 with the fieldViolations).
  The fields are Schema's in https://ai.google.dev/api/caching#Schema, in either spelling.
  ``parametersJsonSchema`` takes JSON Schema and is not held to this;
* A Gemini 2.5 ``thinkingBudget`` outside its model's range (-1, the model's own choice, is
  always taken): 2.5 Pro 128 to 32768, 2.5 Flash 0 to 24576, 2.5 Flash-Lite 512 to 24576 or 0
  (the thinking guide's table, https://ai.google.dev/gemini-api/docs/thinking#set-budget, as
  lobehub/lobehub#8122 quotes it): "The thinking budget (52428) is invalid." (2.5 Pro in
  RooCodeInc/Roo-Code#4399), and 0 on Pro, which cannot stop thinking: "Budget 0 is invalid.
  This model only works in thinking mode." (ChatLunaLab/chatluna#519). The models by name
  (``gemini-2.5-pro``, ``-flash``, ``-flash-lite`` and their dated or preview names).

The checks run in the order listed; which of two refusals Google gives first is not documented.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from gateway.fake import schemas
from gateway.fake.gemini import BAD_REQUEST, error
from gateway.fake.steps import Reply

_FIELDS = ("contents", "tools", "toolConfig", "safetySettings", "systemInstruction", "generationConfig",
           "cachedContent")  # fmt: skip
_COUNT_FIELDS = ("contents", "generateContentRequest")
# A letter or an underscore, then letters, digits and _ . : -, at most 64 in all.
_FUNCTION_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}")
_BAD_NAME = ("Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, "
             "0-9), underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.")  # fmt: skip
MAX_STOPS = 5
_NAMES_MODES = frozenset({"ANY", "VALIDATED"})  # the modes allowedFunctionNames is read in
_ROLES = frozenset({"user", "model", "function", "tool"})
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
_BESIDE_REF = frozenset({"description", "default"})  # and any field starting with "$"
_PENALTIES = ("presencePenalty", "frequencyPenalty")
_UNPAIRED = ("Please ensure that the number of function response parts is equal to the number of function call "
             "parts of the function call turn.")  # fmt: skip
_NO_JSON_WITH_FUNCTIONS = re.compile(r"gemini-[12][.-]")  # the models that refuse JSON mode beside functions


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


GENERATE_FIELDS = frozenset(_FIELDS) | {_snake(f) for f in _FIELDS}
COUNT_FIELDS = frozenset(_COUNT_FIELDS) | {_snake(f) for f in _COUNT_FIELDS}


def _get(obj: Any, name: str) -> Any:
    if not isinstance(obj, dict):
        return None
    value = obj.get(name)
    return obj.get(_snake(name)) if value is None else value


def unknown_field(payload: dict[str, Any], known: Collection[str]) -> Reply | None:
    unknown = [k for k in payload if k not in known]
    if not unknown:
        return None
    texts = [f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.' for k in unknown]
    return error(400, "\n".join(texts), [{"@type": BAD_REQUEST,
                                          "fieldViolations": [{"description": t} for t in texts]}])  # fmt: skip


def _parts(content: Any, kind: str) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return []
    return [p for p in parts if isinstance(p, dict) and isinstance(_get(p, kind), dict)]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _contents_violations(contents: Any) -> list[str]:
    if not isinstance(contents, list) or not contents:
        return ["contents: contents is not specified"]
    # A missing parts list is an empty one to the proto.
    return [f"contents[{n}].parts: contents.parts must not be empty." for n, content in enumerate(contents)
            if isinstance(content, dict) and not _list(content.get("parts"))]  # fmt: skip


def _name_violations(tools: Any) -> list[str]:
    out = []
    for i, tool in enumerate(_list(tools)):
        for j, declaration in enumerate(_list(_get(tool, "functionDeclarations"))):
            name = declaration.get("name") if isinstance(declaration, dict) else None
            if isinstance(name, str) and not _FUNCTION_NAME.fullmatch(name):
                out.append(f"tools[{i}].function_declarations[{j}].name: {_BAD_NAME}")
    return out


def _allowed_names_violations(tool_config: Any) -> list[str]:
    calling = _get(tool_config, "functionCallingConfig")
    if not _list(_get(calling, "allowedFunctionNames")) or calling.get("mode") in _NAMES_MODES:
        return []
    return ["tool_config.function_calling_config.allowed_function_names: allowed_function_names should only "
            "be set when the Mode is ANY or VALIDATED."]  # fmt: skip


def _stop_violations(generation_config: Any) -> list[str]:
    if len(_list(_get(generation_config, "stopSequences"))) <= MAX_STOPS:
        return []
    return [f"generation_config.stop_sequences: the number of stop_sequences must not exceed {MAX_STOPS}."]


def _field_refusal(payload: dict[str, Any]) -> Reply | None:
    found = (_contents_violations(payload.get("contents")) + _name_violations(payload.get("tools"))
             + _allowed_names_violations(_get(payload, "toolConfig"))
             + _stop_violations(_get(payload, "generationConfig")))  # fmt: skip
    if not found:
        return None
    return error(400, "".join(f"* GenerateContentRequest.{v}\n" for v in found))


def _bad_role(contents: list[Any]) -> Reply | None:
    roles = [c.get("role") for c in contents if isinstance(c, dict)]
    if all(not role or role in _ROLES for role in roles):
        return None
    return error(400, "Please use a valid role: user, model.")


def _bad_image(contents: list[Any]) -> Reply | None:
    for content in contents:
        for part in _parts(content, "inlineData"):
            mime = _get(_get(part, "inlineData"), "mimeType")
            if isinstance(mime, str) and mime.startswith("image/") and mime not in _IMAGE_TYPES:
                return error(400, f"Unsupported MIME type: {mime}")
    return None


def _json_with_functions(payload: dict[str, Any], model: str) -> Reply | None:
    config = _get(payload, "generationConfig")
    if not _NO_JSON_WITH_FUNCTIONS.match(model) or _get(config, "responseMimeType") != "application/json":
        return None
    declared = any(_list(_get(tool, "functionDeclarations")) for tool in _list(payload.get("tools")))
    if not declared or _get(_get(_get(payload, "toolConfig"), "functionCallingConfig"), "mode") == "NONE":
        return None
    return error(400, "Function calling with a response mime type: 'application/json' is unsupported")


def _penalty(payload: dict[str, Any], model: str) -> Reply | None:
    config = _get(payload, "generationConfig")
    if model.startswith("gemini-2.5") and any(_get(config, p) for p in _PENALTIES):
        return error(400, f"Penalty is not enabled for models/{model}")
    return None


def _ref_with_siblings(payload: dict[str, Any]) -> Reply | None:
    found = [_get(d, "parametersJsonSchema") for tool in _list(payload.get("tools"))
             for d in _list(_get(tool, "functionDeclarations"))]
    found.append(_get(_get(payload, "generationConfig"), "responseJsonSchema"))
    for schema in found:
        for _, node in schemas.schemas(schema):
            ref = node.get("$ref")
            if ref is not None and any(k not in _BESIDE_REF and not k.startswith("$") for k in node):
                name = ref.rsplit("/", 1)[-1] if isinstance(ref, str) else ref
                return error(400, f"$ref '{name}' was set alongside unsupported fields. If a schema node has $ref "
                                  "set, then only description and default can be set alongside it")  # fmt: skip
    return None


# Google's Schema (https://ai.google.dev/api/caching#Schema): its fields, JSON names.
_SCHEMA_FIELDS = ("type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
                  "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
                  "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum")
SCHEMA_FIELDS = frozenset(_SCHEMA_FIELDS) | {_snake(f) for f in _SCHEMA_FIELDS}


def _unknown_schema_fields(payload: dict[str, Any]) -> Reply | None:
    found: list[tuple[str, str]] = []
    for i, tool in enumerate(_list(payload.get("tools"))):
        for j, declaration in enumerate(_list(_get(tool, "functionDeclarations"))):
            parameters = _get(declaration, "parameters")
            found += _schema_unknowns(parameters, f"tools[{i}].function_declarations[{j}].parameters")
    if not found:
        return None
    texts = [f"Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
             for name, at in found]
    return error(400, "\n".join(texts), [{"@type": BAD_REQUEST, "fieldViolations": [
        {"field": at, "description": text} for (_, at), text in zip(found, texts, strict=True)]}])


def _schema_unknowns(schema: Any, at: str) -> list[tuple[str, str]]:
    if not isinstance(schema, dict):
        return []
    out = [(key, at) for key in schema if key not in SCHEMA_FIELDS]
    properties = schema.get("properties")
    for n, sub in enumerate(properties.values() if isinstance(properties, dict) else ()):
        out += _schema_unknowns(sub, f"{at}.properties[{n}].value")
    out += _schema_unknowns(schema.get("items"), f"{at}.items")
    for n, sub in enumerate(_list(_get(schema, "anyOf"))):
        out += _schema_unknowns(sub, f"{at}.any_of[{n}]")
    return out


# Gemini 2.5's thinking budgets (the thinking guide): (lowest, highest, whether 0 turns it off).
_BUDGETS = (("gemini-2.5-flash-lite", 512, 24576, True), ("gemini-2.5-flash", 0, 24576, True),
            ("gemini-2.5-pro", 128, 32768, False))  # fmt: skip


def _thinking_budget(payload: dict[str, Any], model: str) -> Reply | None:
    budget = _get(_get(_get(payload, "generationConfig"), "thinkingConfig"), "thinkingBudget")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget == -1:
        return None
    for name, low, high, can_stop in _BUDGETS:
        if model.startswith(name):
            if budget == 0 and not can_stop:
                return error(400, "Budget 0 is invalid. This model only works in thinking mode.")
            if not (low <= budget <= high or (budget == 0 and can_stop)):
                return error(400, f"The thinking budget ({budget}) is invalid.")
            return None
    return None


# What the fake's account-bound signatures start with (``signed_for``).
SIGNED_FOR = "ZmFrZS1vcmctc2ln."


def signed_for(org: str, part: str = "QUJDRA") -> str:
    """A thought signature as the fake would give a key of ``org``; ``part`` makes it that
    part's own."""
    return SIGNED_FOR + org + "." + part


def refusal(
    payload: dict[str, Any], issued: Collection[str] = (), model: str = "", org: str | None = None
) -> Reply | None:
    """Why the Gemini API would refuse this generateContent body, or None. ``issued``: the ids
    of the calls the fake answered with (only those must come back signed); ``model``: the
    model in the URL, for the rules that hold for some models only; ``org``: the organization
    of the key that sent it (whose sealed signatures hold)."""
    refused = unknown_field(payload, GENERATE_FIELDS) or _field_refusal(payload)
    if refused is not None:
        return refused
    contents: list[Any] = payload["contents"]  # a list with turns: _field_refusal saw to it
    refused = (_bad_role(contents) or _bad_image(contents) or _json_with_functions(payload, model)
               or _ref_with_siblings(payload) or _penalty(payload, model) or _unknown_schema_fields(payload)
               or _thinking_budget(payload, model))
    if refused is not None:
        return refused
    for content in contents:
        for part in content.get("parts") or () if isinstance(content, dict) else ():
            sig = part.get("thoughtSignature") if isinstance(part, dict) else None
            if isinstance(sig, str) and sig.startswith(SIGNED_FOR) and not sig.startswith(f"{SIGNED_FOR}{org}."):
                return error(400, "Corrupted thought signature.")
    for n, content in enumerate(contents):
        calls = _parts(content, "functionCall")
        for part in calls:
            call = _get(part, "functionCall")
            if call.get("id") in issued and not _get(part, "thoughtSignature"):
                return error(400, "Function call is missing a thought_signature in functionCall parts. This is "
                                  "required for tools to work correctly, and missing thought_signature may lead to "
                                  "degraded model performance. Additional data, function call "
                                  f"`default_api:{call.get('name')}` , position {n + 1}. Please refer to "
                                  "https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")  # fmt: skip
        following = contents[n + 1] if n + 1 < len(contents) else None
        if calls and isinstance(following, dict) and following.get("role") != "model" \
                and len(_parts(following, "functionResponse")) != len(calls):
            return error(400, _UNPAIRED)
        answers = _parts(content, "functionResponse")
        if not answers:
            continue
        asked = _parts(contents[n - 1], "functionCall") if n > 0 else []
        if not asked:
            return error(400, "Please ensure that function response turn comes immediately after a function call turn.")
        if len(answers) != len(asked):
            return error(400, _UNPAIRED)
    return None
