"""What the google-genai SDK does in the e2e tests, run by the interpreter that has it
(``GENAI_PYTHON``, apart from .venv): ``python genai_driver.py BASE SCENARIO [MODEL]`` prints
one JSON object. Shared by test_google_genai.py (a chat upstream) and
test_gemini_upstream_agents.py (a Gemini upstream)."""

import json
import sys
import time

from google import genai
from google.genai import errors, types

base, scenario = sys.argv[1], sys.argv[2]
model = sys.argv[3] if len(sys.argv) > 3 else "gemini-2.5-flash"
client = genai.Client(api_key="dummy", http_options=types.HttpOptions(base_url=base))
out: dict[str, object] = {}
if scenario in ("basic", "listed"):
    r = client.models.generate_content(model=model, contents="say hi",
                                       config=types.GenerateContentConfig(system_instruction="Be brief."))
    out["text"], out["finish"] = r.text, r.candidates[0].finish_reason.value
    out["usage"] = r.usage_metadata.model_dump(exclude_none=True)
    chunks = list(client.models.generate_content_stream(model=model, contents="say hi"))
    out["stream"] = [c.text for c in chunks]
    out["stream_finish"] = chunks[-1].candidates[0].finish_reason.value
    out["count"] = client.models.count_tokens(model=model, contents="How many tokens?").total_tokens
    if scenario == "listed":
        out["models"] = [m.name for m in client.models.list()]
elif scenario == "tools":
    weather = types.FunctionDeclaration(
        name="get_weather", description="Weather of a city",
        parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]))
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[weather])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    first = types.Content(role="user", parts=[types.Part.from_text(text="Weather in Paris?")])
    r1 = client.models.generate_content(model=model, contents=[first], config=config)
    fc = r1.function_calls[0]
    call: dict[str, object] = {"id": fc.id, "name": fc.name, "args": fc.args}
    if r1.candidates[0].content.parts[0].thought_signature:  # a Gemini model's call is signed
        call["signed"] = True
    out["call"] = call
    answer = types.Part.from_function_response(name=fc.name, response={"output": "sunny, 21C"})
    answer.function_response.id = fc.id
    r2 = client.models.generate_content(
        model=model, config=config,
        contents=[first, r1.candidates[0].content, types.Content(role="user", parts=[answer])])
    out["text"] = r2.text
elif scenario == "timed":
    t0 = time.monotonic()
    out["text"] = client.models.generate_content(model=model, contents="say hi").text
    out["seconds"] = time.monotonic() - t0
elif scenario == "recipes":  # the structured-output guide's list[Recipe] and enum examples
    from enum import Enum

    from pydantic import BaseModel

    class Recipe(BaseModel):
        recipe_name: str
        ingredients: list[str]

    class Instrument(Enum):
        PERCUSSION = "Percussion"
        WOODWIND = "Woodwind"

    listed = types.GenerateContentConfig(response_mime_type="application/json", response_schema=list[Recipe])
    r = client.models.generate_content(model=model, contents="List a cookie recipe.", config=listed)
    out["parsed"] = [x.model_dump() for x in r.parsed]
    chunks = list(client.models.generate_content_stream(model=model, contents="List a cookie recipe.",
                                                        config=listed))
    out["stream"] = [c.text for c in chunks]
    enum = types.GenerateContentConfig(response_mime_type="text/x.enum", response_schema=Instrument)
    r = client.models.generate_content(model=model, contents="What is an oboe?", config=enum)
    out["enum"] = [r.text, r.parsed.value if isinstance(r.parsed, Enum) else r.parsed]
elif scenario == "empty":  # an answer with nothing in it (its tokens spent), then the chat goes on
    chat = client.chats.create(model=model)
    r = chat.send_message("hi")
    out["text"], out["finish"] = r.text, r.candidates[0].finish_reason.value
    out["second"] = chat.send_message("again").text
    out["history"] = [c.role for c in chat.get_history(curated=True)]  # what the next turn sends
elif scenario == "error":
    try:
        client.models.generate_content(model=model, contents="say hi")
    except errors.APIError as e:
        out = {"code": e.code, "status": e.status, "message": e.message, "details": e.details}
print(json.dumps(out))
