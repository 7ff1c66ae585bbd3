"""`python -m bench.translation` (part of `make bench`): what translation between wire APIs
costs, measured against the same request untranslated, in one gateway process, one run.

For each client API the same client request (same text asked, same text answered) goes to
an upstream that speaks the client's API and to one that speaks another, so the only
difference between the two is the translation:

    Messages client   on a Messages upstream   vs  on a chat upstream       (Claude Code)
    Responses client  on a Responses upstream  vs  on a chat upstream       (Codex)
    chat client       on a chat upstream       vs  on a Messages upstream   (opencode, SDKs)
    Gemini client     on a chat upstream       vs  a chat client asking the same  (Gemini CLI)
    Gemini client     on a Gemini upstream     vs  a chat client asking the same  (pass-through)

A Gemini client's native twin is a chat client on the chat upstream, sent the chat request
the gateway itself makes of the Gemini one (its translator, in this process): the same text
asked, and the same answer read, so the translated row's difference is the translation and
the pass-through row's what a Gemini client costs untranslated.

Each row buffered and streamed. Per round, every case runs once (native and translated back to
back, their order alternating between rounds), and the table reports medians over rounds of
the per-round ratios: the shared host's noise moves a native run and its translated twin
alike. Figures: throughput at 32 connections (wrk), gateway CPU per request (/proc, around
each wrk run), and for streams the time to the first visible event at one connection (the
gateway holds contentless leading events back, so the first chunk a client reads carries
the first visible one): native and translated asked in turns, request by request, on one
connection, the delta being the median of the per-pair differences.

Goals (issues 20 and 39): throughput ratio >= 0.85, time to first visible event <= +0.3 ms.

Environment: BENCH_SECONDS, BENCH_ROUNDS, BENCH_QUICK (as `python -m bench`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench import load
from bench.__main__ import QUICK, RESULTS, cpu_s, free_port, pinned, spawn
from bench.upstream import TEXT, WORDS
from gateway.translate.base import Target
from gateway.translate.gemini_chat import GeminiToChat

SECONDS = int(os.environ.get("BENCH_SECONDS", "2" if QUICK else "3"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3" if QUICK else "7"))
TTFC_N = 100 if QUICK else 150  # pairs per round
PROMPT = "Hello, how are you?"

# One upstream process answers every API; the gateway sees four upstreams on it, told apart
# by the model asked for: one speaking every API but Gemini's (so nothing is translated) and
# three that speak one API each (so everything else is).
NATIVE, ON_CHAT, ON_MESSAGES, ON_GEMINI = "bench-native", "bench-on-chat", "bench-on-messages", "bench-on-gemini"


@dataclass(frozen=True)
class Case:
    client: str  # the client's API
    path: str  # for a Gemini client, the model's method is put in: ``path.format(model=…, method=…)``
    upstream: str  # the API the twin is sent in (the client's own: passed through)
    model: str  # routes the twin
    corpus: str | None = None  # a real agent request (tests/corpus/requests) instead of one line
    native_client: str | None = None  # the native twin's API, when not the client's own

    @property
    def label(self) -> str:
        who = self.client if self.corpus is None else f"{self.client}: {CORPUS_LABEL[self.corpus]}"
        return who if self.native_client is None else f"{who}; native: a {self.native_client} client asking the same"

    @property
    def upstream_label(self) -> str:
        return self.upstream if self.upstream != self.client else f"{self.upstream} (pass-through)"

    def _asks(self, model: str) -> str:
        """The API the request for ``model`` is in: the native twin's may be another."""
        return self.native_client if model == NATIVE and self.native_client is not None else self.client

    def url(self, base: str, model: str, stream: bool) -> str:
        if self._asks(model) != "gemini":
            return base + (self.path if self._asks(model) == self.client else CHAT_PATH)
        method = "streamGenerateContent" if stream else "generateContent"
        return base + self.path.format(model=model, method=method) + ("?alt=sse" if stream else "")

    def credential(self, model: str) -> dict[str, str]:
        return load.GOOGLE if self._asks(model) == "gemini" else load.BEARER

    def translated(self, model: str) -> str | None:
        """``x-llm-translated`` as the gateway must answer the request for ``model``."""
        return f"{self.client}->{self.upstream}" if model != NATIVE and self.upstream != self.client else None

    def body(self, model: str, stream: bool) -> str:
        if self.client == "gemini":
            gemini = self._gemini()
            if model != NATIVE or self.native_client is None:
                return json.dumps(gemini, ensure_ascii=False, separators=(",", ":"))
            chat = GeminiToChat().request({**gemini, "model": model, "stream": stream}, Target(model))
            assert isinstance(chat, dict), chat  # a refusal: nothing to compare with
            return json.dumps(chat, ensure_ascii=False, separators=(",", ":"))
        doc: dict[str, object] = {"model": model}
        if self.corpus is not None:
            real = json.loads((CORPUS / self.corpus).read_text())["body"]
            doc = {**real, "model": model, "stream": stream}
            return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        if self.client == "messages":
            doc |= {"max_tokens": 256, "messages": [{"role": "user", "content": PROMPT}]}
        elif self.client == "responses":
            doc |= {"input": PROMPT}
        else:
            doc |= {"messages": [{"role": "user", "content": PROMPT}]}
        if stream:
            doc["stream"] = True
        return json.dumps(doc, separators=(",", ":"))


    def _gemini(self) -> dict[str, object]:
        """The Gemini request: model and stream are in its URL, not its body."""
        if self.corpus is None:
            return {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}
        real: dict[str, object] = json.loads((CORPUS / self.corpus).read_text())["body"]
        return real


CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "requests"
CORPUS_LABEL = {"claude-code-2.1.197-first.json": "Claude Code's first request (82 KB, 24 tools)",
                "codex-0.169-first.json": "Codex's first request (45 KB)",
                "gemini-cli-0.61-first.json": "Gemini CLI's first request (31 KB, 8 tools)"}
CHAT_PATH = "/v1/chat/completions"
GEMINI_PATH = "/v1beta/models/{model}:{method}"
CASES = [
    Case("messages", "/v1/messages", "chat", ON_CHAT),
    Case("responses", "/v1/responses", "chat", ON_CHAT),
    Case("chat", CHAT_PATH, "messages", ON_MESSAGES),
    Case("messages", "/v1/messages", "chat", ON_CHAT, "claude-code-2.1.197-first.json"),
    Case("responses", "/v1/responses", "chat", ON_CHAT, "codex-0.169-first.json"),
    Case("gemini", GEMINI_PATH, "chat", ON_CHAT, native_client="chat"),
    Case("gemini", GEMINI_PATH, "chat", ON_CHAT, "gemini-cli-0.61-first.json", native_client="chat"),
    Case("gemini", GEMINI_PATH, "gemini", ON_GEMINI, "gemini-cli-0.61-first.json", native_client="chat"),
]
# BENCH_TRANSLATION_ONLY=gemini: only the rows of that client API (a quicker look at one).
if only := os.environ.get("BENCH_TRANSLATION_ONLY"):
    CASES = [c for c in CASES if c.client == only]


def config(port: int, upstream: str) -> str:
    return (
        f"server: {{port: {port}, log_level: info}}\n"
        "upstreams:\n"
        f"  - {{name: native, base_url: '{upstream}', models: ['{NATIVE}'], max_connections: 1000}}\n"
        f"  - {{name: on-chat, base_url: '{upstream}', models: ['{ON_CHAT}'], apis: [chat], max_connections: 1000}}\n"
        f"  - {{name: on-messages, base_url: '{upstream}', models: ['{ON_MESSAGES}'], apis: [messages], "
        "max_connections: 1000}\n"
        f"  - {{name: on-gemini, base_url: '{upstream.removesuffix('/v1')}/v1beta', models: ['{ON_GEMINI}'], "
        "apis: [gemini], max_connections: 1000}\n"
    )


def check(base: str, case: Case, model: str, stream: bool) -> None:
    """Refuse to time anything that is not the answer: the text must arrive, translated or not."""
    req = urllib.request.Request(case.url(base, model, stream), data=case.body(model, stream).encode(),
                                 headers={"Content-Type": "application/json", **case.credential(model)})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
        translated = r.headers.get("x-llm-translated")
    want = case.translated(model)
    pieces = [w.strip() for w in WORDS] if stream else [TEXT]
    if translated != want or not all(p in text for p in pieces):
        raise RuntimeError(f"{case.client} on {model} (stream={stream}): translated={translated!r}, "
                           f"answer not found in {text[:300]!r}")


def run_one(base: str, pid: int, case: Case, model: str, stream: bool) -> dict[str, float]:
    body = case.body(model, stream)
    url = case.url(base, model, stream)
    c0 = cpu_s(pid)
    tput = load.throughput_and_latency(url, 32, SECONDS, body, case.credential(model))
    return {"rps": tput["rps"], "cpu_us": (cpu_s(pid) - c0) / max(tput["requests"], 1) * 1e6,
            "errors": tput["errors"]}


def first_event(base: str, case: Case) -> dict[str, float]:
    """Native and translated streams asked in turns, request by request, on one connection."""
    sides = tuple((case.url(base, m, True), case.body(m, True), case.credential(m)) for m in (NATIVE, case.model))
    return load.first_chunk_delta("", ("", ""), TTFC_N, sides=(sides[0], sides[1]))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = run(Path(tmp))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "translation.md").write_text(report)


def run(tmp: Path) -> str:
    up_port, gw_port = free_port(), free_port()
    cfg = tmp / "gateway-translation.yaml"
    cfg.write_text(config(gw_port, f"http://127.0.0.1:{up_port}/v1"))
    base = f"http://127.0.0.1:{gw_port}"
    with open(tmp / "gateway-translation.log", "wb") as log:
        upstream = spawn(["-m", "bench.upstream", str(up_port)], up_port, core=0)
        gateway = spawn(["-m", "gateway", "--config", str(cfg)], gw_port, "/healthz", stdout=log)
        try:
            keys = [(case, stream) for case in CASES for stream in (False, True)]
            for case, stream in keys:
                for model in (NATIVE, case.model):
                    check(base, case, model, stream)
                    load.throughput_and_latency(case.url(base, model, stream), 8, 1, case.body(model, stream),
                                                case.credential(model))  # warm-up
            samples: dict[tuple[Case, bool, str], list[dict[str, float]]] = {}
            for r in range(ROUNDS):
                for case, stream in keys:
                    order = (NATIVE, case.model) if r % 2 == 0 else (case.model, NATIVE)
                    for model in order:
                        row = run_one(base, gateway.pid, case, model, stream)
                        samples.setdefault((case, stream, model), []).append(row)
                    if stream:
                        ttfc = first_event(base, case)
                        samples[(case, stream, NATIVE)][-1]["ttfc_ms"] = ttfc["a_ms"]
                        samples[(case, stream, case.model)][-1]["ttfc_ms"] = ttfc["b_ms"]
                        samples[(case, stream, case.model)][-1]["ttfc_delta_ms"] = ttfc["delta_ms"]
        finally:
            for p in (gateway, upstream):
                p.terminate()
                p.wait(10)
    report = table(keys, samples)
    print(report, flush=True)
    return report


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def table(keys: list[tuple[Case, bool]], samples: dict[tuple[Case, bool, str], list[dict[str, float]]]) -> str:
    header = (
        f"Translation: the same client request on an upstream of its own API (native; for a Gemini client, "
        f"a chat client asking the same on a chat upstream) and on one of another API (translated), one gateway process. {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {'quick mode, ' if QUICK else ''}load: "
        f"{'wrk -t1 -c32' if load.have_wrk() else 'python aiohttp client, 32 connections'}, "
        f"{ROUNDS} interleaved rounds of {SECONDS}s, medians of per-round ratios; "
        f"{'gateway pinned to core 1, upstream and load to core 0' if pinned(0) else 'unpinned'}; "
        "goals: throughput >= 0.85x, first visible event <= +0.3 ms"
    )
    lines = [
        header, "",
        "| client API | upstream API | mode | throughput translated/native | CPU/request translated/native "
        "| Δ first visible event p50 | req/s native / translated | CPU µs/request native / translated "
        "| first visible event p50 native / translated | errors |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for case, stream in keys:
        nat, tr = samples[(case, stream, NATIVE)], samples[(case, stream, case.model)]
        tput = _median([t["rps"] / n["rps"] for n, t in zip(nat, tr, strict=True)])
        cpu = _median([t["cpu_us"] / n["cpu_us"] for n, t in zip(nat, tr, strict=True)])
        errors = sum(s["errors"] for s in nat + tr)
        ttfc = "–"
        ttfc_abs = "–"
        if stream:
            delta = _median([t["ttfc_delta_ms"] for t in tr])
            ttfc = f"{delta:+.3f} ms"
            ttfc_abs = (f"{_median([n['ttfc_ms'] for n in nat]):.3f} / "
                        f"{_median([t['ttfc_ms'] for t in tr]):.3f} ms")
        lines.append(
            f"| {case.label} | {case.upstream_label} | {'stream' if stream else 'buffered'} | {tput:.2f}x | {cpu:.2f}x "
            f"| {ttfc} | {_median([n['rps'] for n in nat]):.0f} / {_median([t['rps'] for t in tr]):.0f} "
            f"| {_median([n['cpu_us'] for n in nat]):.0f} / {_median([t['cpu_us'] for t in tr]):.0f} "
            f"| {ttfc_abs} | {errors:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
