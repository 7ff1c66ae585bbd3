"""The error codes the gateway makes, gathered from its source, and the page that lists them.

The codes are gathered the way a reader would grep for them: the literal in the code position of
each call that makes an error (``gateway_failure``, ``bad_request``, ``Rejection``, ``Refusal``,
``EncodingProblem``, ``Ending``, ``error_body``), a local or module-level name bound to literals,
the defaults of those, the error payloads a stream reader makes up (a dict with ``code`` and
``status``), and the transport tables. A code built at run time (an f-string) cannot be gathered
this way and is refused: write each one out. With each code go the statuses it is sent with,
its class (the ``x-llm-error-type`` it is stamped with) and the messages the source gives it.
"""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import gateway
from gateway import bad_http
from gateway.apis import DIALECTS
from gateway.docs_gen.markdown import cell, generated_header
from gateway.errors import ErrorType
from gateway.pipeline import outcome, relay
from gateway.policy.classify import classify
from gateway.translate.base import Refusal

PACKAGE = Path(gateway.__file__).resolve().parent


@dataclass(frozen=True)
class Maker:
    """Where a maker's arguments sit: positions of the code, status, classification, message."""

    code: int
    status: int | None
    cls: int | None
    message: int


MAKERS = {
    "gateway_failure": Maker(3, 0, 1, 2), "bad_request": Maker(1, None, None, 0),
    "Rejection": Maker(1, None, None, 0), "Refusal": Maker(1, None, None, 0),
    "EncodingProblem": Maker(2, 0, None, 1), "Ending": Maker(2, None, 0, 1), "error_body": Maker(2, 0, 3, 1),
    "FrameRefused": Maker(1, 0, None, 2), "KeyRefused": Maker(1, 0, None, 2),
}  # fmt: skip
# Answered with one status whatever the call says (their docstrings: "answered 400").
FIXED_STATUS = {"bad_request": 400, "Rejection": 400, "Refusal": 400}
# These carry no classification: bad_request makes one (an `unknown`), and every Rejection,
# Refusal and EncodingProblem is answered through bad_request (see pipeline/forward.py, legs.py,
# admit.py), so their class is bad_request's.
_BAD_REQUEST_CLASS = outcome.bad_request("").classification.type.value
# A FrameRefused (the Responses API's WebSocket mode) is a client's error, as bad_request's; so is
# a KeyRefused (a key asked of POST /v1/gateway/keys that may not be issued).
FIXED_CLASS = dict.fromkeys(("bad_request", "Rejection", "Refusal", "EncodingProblem", "FrameRefused",
                             "KeyRefused"), _BAD_REQUEST_CLASS)  # fmt: skip


@dataclass
class Made:
    """One code: what the source says of it."""

    statuses: set[int | None] = field(default_factory=set)  # None: in a stream already under way
    classes: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)  # in source order, each once
    modules: set[str] = field(default_factory=set)

    def add(self, status: int | None, classes: set[str], message: str | None, module: str) -> None:
        self.statuses.add(status)
        self.classes |= classes
        if message and message not in self.messages:
            self.messages.append(message)
        self.modules.add(module)


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


Binding = tuple[str, ast.Assign | None]  # a string, and the tuple assignment that bound it with others


def _strings(node: ast.expr, scopes: Sequence[ast.AST]) -> list[Binding] | None:
    """The literal strings ``node`` can be, looking names up in the enclosing scopes; None when
    it is something else (a field of another object: its maker is collected on its own)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(node.value, None)]
    if isinstance(node, ast.JoinedStr):
        raise ValueError(f"line {node.lineno}: a code built at run time; write each one out")
    if isinstance(node, ast.IfExp):
        branches = [_strings(b, scopes) for b in (node.body, node.orelse)]
        return [s for b in branches if b is not None for s in b]
    if isinstance(node, ast.Name):
        found = [s for scope in scopes for s in _bound(node.id, scope, scopes)]
        return found or None
    return None


def _bound(name: str, scope: ast.AST, scopes: Sequence[ast.AST]) -> Iterator[Binding]:
    for stmt in ast.walk(scope):
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:
            if isinstance(target, ast.Name) and target.id == name:
                yield from _strings(stmt.value, scopes) or ()
            elif isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
                for t, v in zip(target.elts, stmt.value.elts, strict=False):
                    if isinstance(t, ast.Name) and t.id == name:
                        yield from ((s, stmt) for s, _ in _strings(v, scopes) or ())


def _error_type(node: ast.expr) -> str | None:
    """``ErrorType.X`` as its value."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ErrorType":
        return ErrorType[node.attr].value
    return None


def _classes(node: ast.expr, scopes: Sequence[ast.AST], before: int, depth: int = 0) -> set[str]:
    """The error types a classification expression can carry: ``Classification(ErrorType.X,
    ...)``, ``Classification.of(ErrorType.X)``, a name assigned one (the last assignment before
    line ``before`` in the innermost scope that has one), or a call to a function of the module
    whose returns are such expressions. Empty when the source does not say."""
    if depth > 4:
        return set()
    if (found := _error_type(node)) is not None:
        return {found}
    if isinstance(node, ast.Call):
        callee = node.func
        if _name(callee) == "Classification" or (
            isinstance(callee, ast.Attribute) and callee.attr == "of"
            and _name(callee.value) == "Classification"
        ):
            typed = (k.value for k in node.keywords if k.arg == "type")
            first = node.args[0] if node.args else next(typed, None)
            return _classes(first, scopes, before, depth + 1) if first is not None else set()
        module = scopes[-2] if len(scopes) >= 2 else None  # the module's own tree (before the constants)
        defs = [f for f in ast.walk(module) if isinstance(f, ast.FunctionDef) and f.name == _name(callee)] \
            if module is not None else []  # fmt: skip
        out: set[str] = set()
        for f in defs:
            for ret in (r for r in ast.walk(f) if isinstance(r, ast.Return) and r.value is not None):
                out |= _classes(ret.value, [f, *scopes], ret.lineno + 1, depth + 1)  # type: ignore[arg-type]
        return out
    if isinstance(node, ast.Name):
        for scope in scopes:
            assigns = [s for s in ast.walk(scope) if isinstance(s, ast.Assign) and s.lineno < before
                       and any(isinstance(t, ast.Name) and t.id == node.id for t in s.targets)]  # fmt: skip
            if assigns:
                last = max(assigns, key=lambda s: s.lineno)
                return _classes(last.value, scopes, last.lineno, depth + 1)
    return set()


def message_text(node: ast.expr | None, scopes: Sequence[ast.AST]) -> str | None:
    """A message as the source writes it, with ``…`` where an f-string puts a value; None when
    it is not written there (a variable, an exception's text)."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)  # type: ignore[misc]
    if isinstance(node, ast.Name):  # the last assignment of that name in the innermost scope
        for scope in scopes:
            assigns = [s for s in ast.walk(scope) if isinstance(s, ast.Assign)
                       and any(isinstance(t, ast.Name) and t.id == node.id for t in s.targets)]  # fmt: skip
            if assigns:
                return message_text(max(assigns, key=lambda s: s.lineno).value, [])
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = message_text(node.left, scopes), message_text(node.right, scopes)
        return left + right if left is not None and right is not None else None
    return None


def _together(stmt: ast.Assign | None) -> dict[str, ast.expr]:
    """The names a tuple assignment binds, each to its value."""
    if stmt is None or not isinstance(stmt.value, ast.Tuple):
        return {}
    return {t.id: v for target in stmt.targets if isinstance(target, ast.Tuple)
            for t, v in zip(target.elts, stmt.value.elts, strict=False)
            if isinstance(t, ast.Name)}  # fmt: skip


def _module_constants(trees: dict[Path, ast.Module]) -> ast.Module:
    """Every module-level ``NAME = "..."`` of the gateway, as one module to look names up in."""
    body: list[ast.stmt] = [s for tree in trees.values() for s in tree.body if isinstance(s, ast.Assign)]
    return ast.Module(body=body, type_ignores=[])


def _arg(call: ast.Call, at: int | None, keyword: str) -> ast.expr | None:
    if at is not None and len(call.args) > at:
        return call.args[at]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def made_codes(package: Path = PACKAGE) -> dict[str, Made]:
    """Each code the gateway makes, with what its source says of it."""
    codes: dict[str, Made] = {}
    trees = {path: ast.parse(path.read_text()) for path in sorted(package.rglob("*.py"))}
    constants = _module_constants(trees)
    for path, tree in trees.items():
        module = path.relative_to(package.parent).as_posix()
        parts = path.relative_to(package).parts
        if "fake" in parts or "docs_gen" in parts:
            continue  # the fake upstream plays providers, its errors are theirs; this package makes none
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            if _name(call.func) in MAKERS:
                _add_call(codes, call, tree, functions, constants, module)
        # Error payloads a reader makes up for an upstream's broken stream (`"code": "..."`): the
        # gateway classifies them as any error event, by the status they carry.
        for d in (n for n in ast.walk(tree) if isinstance(n, ast.Dict)):
            pairs = {k.value: v for k, v in zip(d.keys, d.values, strict=True) if isinstance(k, ast.Constant)}
            number = _int(pairs.get("status"))
            if "code" in pairs and number is not None:
                text = message_text(pairs.get("message"), [])
                for c, _ in _strings(pairs["code"], [tree, constants]) or ():  # a literal, or a constant's
                    payload = json.dumps({"error": {"code": c, "message": text, "status": number}})
                    kind = classify(number, {}, payload.encode(), now_s=0.0).type.value
                    codes.setdefault(c, Made()).add(number, {kind}, text, module)
    table = "gateway/pipeline/outcome.py"
    for transport, (number, c, text) in outcome._TRANSPORT_MESSAGES.items():
        kind = classify(None, {}, b"", now_s=0.0, transport_error=transport).type.value
        codes.setdefault(c, Made()).add(number, {kind}, text, table)
    for transport, text in relay._TRANSPORT_TEXT.items():  # a stream under way ends with its name
        kind = classify(None, {}, b"", now_s=0.0, transport_error=transport).type.value
        codes.setdefault(transport.value, Made()).add(None, {kind}, text, "gateway/pipeline/relay.py")
    # A request aiohttp's parser refuses reaches no route; its answer is made apart (bad_http.py).
    for exc in bad_http.EXAMPLES:
        codes.setdefault(bad_http.CODE, Made()).add(400, {ErrorType.UNKNOWN.value}, bad_http.described(exc),
                                                    "gateway/bad_http.py")  # fmt: skip
    return codes


def _int(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _add_call(codes: dict[str, Made], call: ast.Call, tree: ast.Module,
              functions: list[ast.FunctionDef | ast.AsyncFunctionDef], constants: ast.Module,
              module: str) -> None:  # fmt: skip
    """The codes one maker call makes, with their statuses, classes and message."""
    name = _name(call.func)
    maker = MAKERS[name]
    code = _arg(call, maker.code, "code")
    if code is None:  # the maker's default
        default = inspect.signature(outcome.bad_request).parameters["code"].default
        code = ast.Constant(Refusal("").code if name == "Refusal" else default)
    status = _arg(call, maker.status, "status")
    number = FIXED_STATUS[name] if name in FIXED_STATUS and status is None else _int(status)
    # Innermost first: a name is looked up where it is used before where it is defined.
    around = (f for f in functions if f.lineno <= call.lineno <= (f.end_lineno or 0))
    inner = sorted(around, key=lambda f: -f.lineno)
    scopes: list[ast.AST] = [*inner, tree, constants]
    cls_node = _arg(call, maker.cls, "c")
    if name in FIXED_CLASS:
        classes = {FIXED_CLASS[name]}
    else:
        classes = _classes(cls_node, scopes, call.lineno) if cls_node is not None else set()
    message = message_text(_arg(call, maker.message, "message"), [*inner, tree])
    for c, together in _strings(code, scopes) or ():
        # A code bound in one tuple with its class and status (`kind, status, code =
        # ErrorType.BUDGET, 402, "..."`): those are its own, whatever other branches bind.
        bound = _together(together)
        paired = {t for e in bound.values() if (t := _error_type(e))}
        own = _int(bound.get(status.id)) if isinstance(status, ast.Name) else None
        sent = own if own is not None else number
        codes.setdefault(c, Made()).add(sent, paired or classes, message, module)


def status_text(status: int | None, code: str) -> str:
    """The status as a reader needs it: where an API answers another one, which."""
    if status is None:
        return "mid-stream"
    answered = {(d.error_status(status, code), d.api) for d in DIALECTS}
    others = sorted(answered - {(status, d.api) for d in DIALECTS})
    if not others:
        return str(status)
    return f"{status} ({', '.join(f'{s} on {api}' for s, api in others)})"


# What each code means, in a sentence: the one part of the page the source cannot say. A code
# made without an entry here, or an entry for a code no longer made, fails the page's render.
MEANINGS = {
    "invalid_json": "The request body (over WebSocket, a frame) is not a JSON document (empty, not UTF-8, "
    "nested too deeply or not valid JSON); never forwarded.",
    "invalid_body": "The request body (over WebSocket, a frame) is JSON but not an object.",
    "invalid_event": "A frame of the Responses API's WebSocket mode that is no `response.create` it can "
    "answer (another `type`, a binary frame, `background`, a `generate` that is no boolean): answered "
    "with an error frame, and the connection goes on.",
    "bad_http_request": "The request is not valid HTTP/1.1 (a header line over 8,190 bytes, a malformed "
    "request line or header, broken body framing): refused before any route, in the OpenAI shape as no "
    "API is known yet, quoting none of the request's bytes; the connection closes.",
    "duplicate_member": "The request body's object names a member twice (`model`, `stream`, `max_tokens`, "
    "anything, however its name is escaped): the gateway reads the last, a provider may read the first or "
    "refuse the body, so the key's rules, budget and routing could be held to another request than the "
    "one served; never forwarded. Members of nested objects may repeat.",
    "invalid_messages": "`messages` is not a list of message objects.",
    "invalid_input": "A Responses request's `input` is not a string or a list of input item objects.",
    "invalid_contents": "A Gemini request's `contents` is not a list of Content objects.",
    "missing_model": "The request names no model.",
    "invalid_model": "`model` (on Gemini's paths, the model in the URL) is not a string, is longer than "
    "256 characters (Anthropic's own limit), or cannot be put in a Gemini URL.",
    "invalid_stream": "`stream` is not true or false.",
    "invalid_path": "The path cannot be forwarded safely (it would leave the upstream's base path).",
    "invalid_content_encoding": "The body does not decode with its `Content-Encoding`, or has too many "
    "encoding layers (on messages with Anthropic's `error.details.error_code` "
    "`request_body_encoding_invalid`).",
    "unsupported_content_encoding": "A request `Content-Encoding` other than gzip, deflate or identity (on "
    "messages a 400 with Anthropic's `error.details.error_code` `request_body_encoding_unsupported`).",
    "untranslatable_request": "A translated request uses something the upstream's API has no equivalent for.",
    "invalid_type": "A field of a translated request has a JSON type its API does not allow there (a number "
    "where a list belongs, say); the message names the field as the client's API does, never its value.",
    "no_translation": "The upstream speaks no API the request can be translated to (`upstreams[].apis`); "
    "404 for a path of an API it does not speak.",
    "invalid_key_param": "A Gemini caller's `?key=` holds a CR, LF or NUL (percent-encoded), which no HTTP "
    "header may carry (RFC 9110 §5.5); where the gateway passes client keys through it would go "
    "upstream in one.",
    "invalid_header": "A header the gateway would send upstream holds a CR, LF or NUL (RFC 9110 §5.5); "
    "both upstream clients refuse to write it, and nothing is sent.",
    "missing_client_key": "Client keys are configured and the request carries none; 401, and 400 to Codex, "
    "which stops on a 400 but retries a 401 five times.",
    "invalid_client_key": "Client keys are configured and the one the request carries matches none; 401, and "
    "400 to Codex.",
    "expired_client_key": "The request's key is past its `expires_at`: the message names the key and when "
    "it expired (its holder has the key); a reload that moves `expires_at` lets it in again. 401, and 400 "
    "to Codex.",
    "disabled_client_key": "The request's key, or its team, is turned off (`keys[].disabled`, "
    "`teams[].disabled`), or, for an issued key, the admin key that issued it or its team is no longer in "
    "the config: the message names the key and tells its holder to ask the operator; its name, "
    "spend and metrics are kept, and a reload that turns it back on lets it in again. 401, and 400 to Codex.",
    "budget_exhausted": "The key's (or its team's) budget for the period is spent; `x-llm-error-reset-at` "
    "is the period's end. Codex gets its own 429 `usage_limit_reached` instead.",
    "model_not_allowed": "The key may not use the requested model (`keys[].models`); 403, and 400 to Codex, "
    "which stops on a 400 but retries a 403 five times.",
    "background_not_metered": "A Responses request with `background: true` from a key with a budget or "
    "`tokens_per_minute`: such a response is answered before it runs, without usage, and billed later, so "
    "the key's rules could not hold it; sent without `background` it is served.",
    "model_not_priced": "The key has a budget (its own or its team's) and the requested model has no price "
    "(`prices:`, or the shipped table), so its spend could not be counted; 403, and 400 to Codex.",
    "path_not_allowed": "A relayed request from a key with `models`, limits or a budget and without "
    "`admin: true` that the key's rules cannot be held to: anything but a `POST` naming its model in a JSON "
    "body to `/v1/completions`, `/v1/embeddings` and the like (batches, files, stored responses, batch "
    "results), whatever its body says. Model listings are not refused.",
    "admin_required": "`GET /v1/gateway/keys`, `POST /v1/gateway/keys` or `DELETE /v1/gateway/keys/{name}` "
    "without a key that has `admin: true` (an issued key never has it).",
    "invalid_key_request": "`POST /v1/gateway/keys` asked for a key a key of the file could not be (a rule "
    "out of range, an unknown field or team, an `expires_at` without a zone or past), or for what the "
    "gateway decides (`key`, `key_sha256`, `admin`); the message names the field, never what was sent.",
    "key_name_taken": "`POST /v1/gateway/keys` named a key of the file, or an issued key that has not ended.",
    "issued_keys_full": "`keys_api.max_issued` issued keys have not ended: revoke one, or wait for one to "
    "end.",
    "issue_rate_limited": "`keys_api.issued_per_minute` keys were issued this minute; `retry-after` is the "
    "minute's end.",
    "issued_keys_unavailable": "The state store did not answer an issue or a revocation: it may not have "
    "been done (read the list, then try again).",
    "keys_api_off": "`POST /v1/gateway/keys` where keys are not issued: `keys_api.max_issued: 0`, or "
    "`server.workers` above 1 on `state: {backend: memory}`.",
    "issued_key_not_found": "`DELETE /v1/gateway/keys/{name}` names no issued key (never issued, revoked, "
    "or ended more than an hour ago).",
    "key_in_config": "`DELETE /v1/gateway/keys/{name}` names a key of the config file: remove it there and "
    "reload.",
    "no_client_key": "`GET /v1/gateway/key` on a gateway that asks no key.",
    "key_requests_per_minute": "The key's `requests_per_minute` is used up; `retry-after` is the "
    "minute's end.",
    "key_tokens_per_minute": "The key's `tokens_per_minute` is used up (or the request alone counts more "
    "than it: sent only as a minute's first); `retry-after` is the minute's end.",
    "key_tokens_held": "The key's `tokens_per_minute` is not used up, but requests in flight hold the rest "
    "(each counted at its prompt and all the output it asks for until it ends); `retry-after` is 2 s.",
    "key_parallel_limit": "The key has `parallel` requests in flight already; `retry-after` is 1 s.",
    "key_budget_held": "The key's (or its team's) budget is not spent, but requests in flight hold the rest "
    "at what they may cost at most until they end; `retry-after` is 2 s.",
    "accounting_unavailable": "`accounting.when_store_down: closed` and the state store does not answer.",
    "pool_auth": "No deployment of the pool can serve and a refused key is the soonest back: the provider "
    "refused every key (the gateway's, so not a 401, which would tell the client its own key is bad), or "
    "the rest are out for longer (the message counts each reason); or the one that holds the stored "
    "response a chained request continues was refused.",
    "upstream_auth": "The provider refused the credentials the gateway sent (an upstream's `api_key`, or "
    "none where clients hold gateway keys); the provider's body, which may quote part of the key, is not "
    "passed on.",
    "pool_budget": "No deployment of the pool can serve and a key out of credit is the soonest back (the "
    "message counts each reason: refused keys, open circuits); or the one that holds the stored response "
    "a chained request continues is out of credit.",
    "pool_model_not_found": "No deployment of the pool has the model asked for: each answered 404 for it "
    "(no such deployment, a model not pulled, no access for its key) within `cooldowns.model_missing_s`.",
    "pool_reloaded": "A config reload took every deployment of the pool this request could go to out of it "
    "while the request waited for a rate limit's reset (a removed key is never called again); retryable: the "
    "retry meets the config in force.",
    "pool_rate_limited": "Every deployment of the pool is rate limited and the earliest reset is too far "
    "to wait for, or the configured `limits` of the deployment a request not retried along the pool went "
    "to are used up this minute, or the one deployment that holds the stored response a chained request "
    "continues (`previous_response_id`) is rate limited that long (with `retry-after`); or the configured "
    "`limits` are held only by the estimates of requests in flight and the request waited as long as it "
    "may (`retry-after` is then 1 s: their answers give room back, not the minute's end).",
    "not_found": "No such endpoint.",
    "method_not_allowed": "A TRACE or CONNECT request (405 with `Allow`): never forwarded, a TRACE echo "
    "would carry the upstream `api_key` the gateway adds.",
    "model_not_found": "No upstream or pool is configured for the requested model.",
    "websocket_not_supported": "A WebSocket upgrade of `GET /v1/responses` (the Responses API's WebSocket "
    "mode) where `server.responses_websocket` is false: never forwarded; 426, which Codex takes as \"use "
    "HTTPS\" at once. On an open connection when a reload turns the mode off: the error frame of each "
    "turn it holds and has not started (with its `stream_id`), sent at once; the turns under way end "
    "whole, then the connection is closed 1001.",
    "websocket_connection_limit_reached": "The Responses API's WebSocket mode: the connection has been "
    "open `server.responses_websocket_max_age_s` (by default 60 minutes, as OpenAI's). Sent as the "
    "connection's error event (no `stream_id`) once its turns under way, if any, are answered, then the "
    "connection is closed 1001; Codex and the Agents SDK open a new one. Each turn the connection holds "
    "and has not started gets it too, at once, with its `stream_id`.",
    "invalid_stream_id": "The Responses API's WebSocket mode: a `response.create` whose `stream_id` is not "
    "1-256 letters, digits, `_`, `-` or `.` (OpenAI's rule): an error frame naming no lane, and the "
    "connection goes on.",
    "websocket_stream_limit_reached": "The Responses API's WebSocket mode: a frame on a 33rd distinct named "
    "`stream_id` of one connection (OpenAI's limit of 32 for a connection's life; the default lane is not "
    "counted): an error frame with that `stream_id`; the connection and its other lanes go on.",
    "previous_response_not_found": "OpenAI's 400 for a `previous_response_id` it holds no response of, "
    "answered by the gateway without a call where it knows none holds it: a turn chained to a WebSocket "
    "`generate: false` id (the gateway's own) from anywhere but its connection, and, in the WebSocket "
    "mode, a `response.create` chained to a response another lane of the same connection is still "
    "generating (not stored yet): an error frame with the turn's `stream_id`; sent again once that "
    "response has completed, the turn is taken.",
    "websocket_queue_full": "The Responses API's WebSocket mode: a `response.create` that comes while its "
    "connection already holds 24 turns, all lanes together (16 in flight, as OpenAI's guide allows, and 8 "
    "queued behind them; the guide queues without saying how many): an error frame with its `stream_id`, "
    "sent at once; the turns taken and the connection go on. The gateway's own: the reading never waits "
    "for a lane, so no lane holds up another's frames or the pings.",
    "request_timeout": "The client did not send its body within `timeouts.idle_s` (on messages a 400 with "
    "Anthropic's `error.details.error_code` `request_body_timeout`).",
    "request_too_large": "The body is over `server.max_body_bytes`, before or after decoding; refused "
    "before it is read.",
    "internal_error": "A bug in the gateway (logged as `unhandled_error`).",
    "upstream_unreachable": "The gateway could not connect to the upstream.",
    "upstream_reset": "The upstream closed the connection before its answer was complete.",
    "upstream_timeout": "No connection, response head or first output within `timeouts` (or the deadline).",
    "empty_stream": "The upstream answered a streamed request with no event at all.",
    "malformed_event": "A stream event that is not valid JSON.",
    "event_too_large": "A stream event over 64 MiB (it is never held whole): before anything was shown a "
    "502, after it the stream's error event; not retried.",
    "response_too_large": "An answer over 256 MiB, which the gateway would have to hold whole to relay "
    "(an answer that does not stream); never cut and passed on as complete, not retried.",
    "circuit_open": "The upstream's circuit is open (with `retry-after`); or no deployment of a pool can "
    "serve and an open circuit is the soonest back (the message counts each reason).",
    "stream_broken": "A stream under way ended before its end marker.",
    "reset": "The connection of a stream under way was reset.",
    "connect": "The connection of a stream under way was lost.",
    "idle_timeout": "A stream under way sent no data within `timeouts.idle_s`.",
    "first_byte_timeout": "The upstream did not answer a stream under way in time.",
    "first_token_timeout": "A stream whose head went to a client with a short head time (Gemini CLI) "
    "showed nothing within `timeouts.first_token_s`.",
    "gateway_shutdown": "`server.drain_s` ran out before the answer began (with `retry-after`), or while the "
    "stream was under way; retryable, by another replica. In the Responses API's WebSocket mode, also the "
    "error frame (with its `stream_id`) of each turn a connection holds and has not started when the "
    "drain begins, sent at once.",
}


def _order(item: tuple[str, Made]) -> tuple[int, int, str]:
    """By status (mid-stream codes last), then code."""
    code, made = item
    numbers = [s for s in made.statuses if s is not None]
    return (0 if numbers else 1, min(numbers, default=0), code)


def render() -> str:
    codes = made_codes()
    unexplained = sorted(set(codes) - set(MEANINGS))
    stale = sorted(set(MEANINGS) - set(codes))
    unclassed = sorted(c for c, m in codes.items() if not m.classes)
    if unexplained or stale or unclassed:
        raise ValueError(
            f"gateway/docs_gen/errors.py: codes without a meaning in MEANINGS: {unexplained}; "
            f"meanings of codes no longer made: {stale}; "
            f"codes whose class the source does not say: {unclassed}"
        )
    out = [
        generated_header(),
        "# Error codes",
        "",
        "Every code the gateway puts in an error it makes itself, gathered from its source. Such an error "
        "comes in the request's API's own envelope, with the code in the error object and its class "
        "in the `x-llm-error-type` header; errors passed on from an upstream keep the provider's own "
        "code. *mid-stream*: the error event that ends a stream already under way, whose status was "
        "sent before (on Responses the code is in `x_llm_code`, beside a `code` Responses clients "
        "read: see [errors inside a stream](../errors/index.md#errors-inside-a-stream)).",
        "",
        "| code | status | class | meaning |",
        "| --- | --- | --- | --- |",
    ]
    ordered = sorted(codes.items(), key=_order)
    for code, made in ordered:
        statuses = ", ".join(status_text(s, code) for s in sorted(made.statuses, key=lambda s: s or 1000))
        classes = ", ".join(f"`{c}`" for c in sorted(made.classes))
        out.append(f"| [`{code}`](#{code}) | {statuses} | {classes} | {cell(MEANINGS[code])} |")
    out += ["", "## What each says", "",
            "The messages the source gives each code (`…` where it fills in a value), and where it is made."]
    for code, made in ordered:
        out += ["", f"### `{code}`", ""]
        said = [f"- `` {m} ``" if "`" in m else f"- `{m}`" for m in made.messages]
        out += said or ["- (a message built at run time)"]
        out.append(f"- made in {', '.join(f'`{m}`' for m in sorted(made.modules))}")
    return "\n".join(out) + "\n"
