"""Capture what the google-genai Python SDK really sends to a Gemini API endpoint.

Run with a Python that has ``google-genai`` (the SDK is no dependency of the gateway):

    python -m venv /tmp/genai && /tmp/genai/bin/pip install google-genai
    /tmp/genai/bin/python tests/corpus/requests/capture_google_genai.py OUT_DIR

A loopback logger (standard library only, so the SDK's venv needs nothing more) saves every
request (path with its query, headers without ``x-goog-api-key``, body untouched) and
answers in the Gemini API's shapes. The SDK is driven through the calls an application
makes: a request with every carried knob (system instruction, function declarations with
``parameters``, tool config, generation config with a JSON schema and thinking, an inline
image), its function call answered and the result sent back, a streamed request, and two
structured outputs whose root is not an object: Google's own example, a list of a pydantic
model (``response_schema=list[Recipe]``), and an enum (``response_mime_type="text/x.enum"``).
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google import genai
from google.genai import types
from pydantic import BaseModel

MODEL = "gemini-2.5-flash"
USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110}
# A 1x1 red PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
SEEN: list[dict[str, Any]] = []


class Recipe(BaseModel):  # the structured-output guide's example
    recipe_name: str
    ingredients: list[str]


class Instrument(Enum):  # the guide's enum example
    PERCUSSION = "Percussion"
    STRING = "String"
    WOODWIND = "Woodwind"
    BRASS = "Brass"
    KEYBOARD = "Keyboard"


def _answer(parts: list[dict[str, Any]]) -> dict[str, Any]:
    content = {"role": "model", "parts": parts}
    return {"candidates": [{"content": content, "finishReason": "STOP", "index": 0}], "usageMetadata": USAGE}


class Logger(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("x-goog-api-key", "host")}
        SEEN.append({"method": "POST", "path": self.path, "headers": headers, "body": json.loads(body)})
        if ":streamGenerateContent" in self.path:
            events = [_answer([{"text": "Hi"}]), _answer([{"text": " there."}])]
            del events[0]["candidates"][0]["finishReason"]
            data = b"".join(b"data: " + json.dumps(e).encode() + b"\r\n\r\n" for e in events)
            self._send(data, "text/event-stream")
        elif ":countTokens" in self.path:
            self._send(json.dumps({"totalTokens": 42}).encode(), "application/json")
        elif len(SEEN) == 1:
            call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
            self._send(json.dumps(_answer([call])).encode(), "application/json")
        else:
            self._send(json.dumps(_answer([{"text": "It is sunny."}])).encode(), "application/json")

    def _send(self, data: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Logger)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = genai.Client(
        api_key="dummy", http_options=types.HttpOptions(base_url=f"http://127.0.0.1:{server.server_port}")
    )
    weather = types.FunctionDeclaration(
        name="get_weather",
        description="The weather in a city",
        parameters=types.Schema(
            type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]
        ),
    )
    config = types.GenerateContentConfig(
        system_instruction="You are terse.",
        tools=[types.Tool(function_declarations=[weather])],
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="AUTO")),
        temperature=0.2, top_p=0.9, top_k=40, max_output_tokens=256, stop_sequences=["END"],
        thinking_config=types.ThinkingConfig(thinking_budget=1024, include_thoughts=True),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )  # fmt: skip
    first = types.Content(role="user", parts=[
        types.Part.from_text(text="What is the weather in Paris? Here is a picture of the sky."),
        types.Part.from_bytes(data=PNG, mime_type="image/png"),
    ])  # fmt: skip
    r1 = client.models.generate_content(model=MODEL, contents=[first], config=config)
    call = r1.function_calls[0] if r1.function_calls else None
    assert call is not None
    answered = types.Part.from_function_response(name=call.name or "", response={"result": "sunny, 21C"})
    turns = [first, r1.candidates[0].content, types.Content(role="user", parts=[answered])]  # type: ignore[index]
    client.models.generate_content(model=MODEL, contents=turns, config=config)
    schema = types.GenerateContentConfig(
        response_mime_type="application/json",
        response_schema=types.Schema(type="OBJECT", properties={"answer": types.Schema(type="STRING")}),
    )
    "".join(
        c.text or ""
        for c in client.models.generate_content_stream(model=MODEL, contents="Say hi", config=schema)
    )
    client.models.count_tokens(model=MODEL, contents="How many tokens is this?")
    recipes = types.GenerateContentConfig(response_mime_type="application/json", response_schema=list[Recipe])
    client.models.generate_content(model=MODEL, contents="List a few popular cookie recipes.", config=recipes)
    instrument = types.GenerateContentConfig(response_mime_type="text/x.enum", response_schema=Instrument)
    client.models.generate_content(model=MODEL, contents="What type of instrument is an oboe?", config=instrument)
    server.shutdown()
    for i, s in enumerate(SEEN):
        doc = {"client": f"google-genai {genai.__version__} (PyPI, Python)", **s}
        Path(out, f"genai-{i + 1}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print("saved", len(SEEN), "requests in", out)


if __name__ == "__main__":
    main()
