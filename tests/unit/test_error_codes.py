"""Every code the gateway puts in an error it makes is in README's "Error contract", with its
status: clients match on these codes, so one the table lacks is a contract nobody wrote down.

The codes are gathered from the source the way a reader would grep for them: the literal in the
code position of each call that makes an error (``gateway_failure``, ``bad_request``,
``Rejection``, ``Refusal``, ``EncodingProblem``, ``Ending``, ``error_body``), a local or
module-level name bound to literals, the defaults of those, and the transport tables. A code
built at run time (an f-string) cannot be checked this way and fails the test.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

from gateway.pipeline import outcome, relay
from gateway.translate.base import Refusal

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONTRACT = README[README.index("## Error contract"):README.index("### Taxonomy")]

# The call, the position of its code argument, and of its status argument (None: none given).
MAKERS = {"gateway_failure": (3, 0), "bad_request": (1, None), "Rejection": (1, None), "Refusal": (1, None),
          "EncodingProblem": (2, 0), "Ending": (2, None), "error_body": (2, 0)}
# Answered with one status whatever the call says (their docstrings: "answered 400").
FIXED_STATUS = {"bad_request": 400, "Rejection": 400, "Refusal": 400}


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _strings(node: ast.expr, scopes: list[ast.AST]) -> Iterator[str] | None:
    """The literal strings ``node`` can be, looking names up in the enclosing scopes; None when
    it is something else (a field of another object: its maker is collected on its own)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return iter([node.value])
    if isinstance(node, ast.JoinedStr):
        raise AssertionError(f"line {node.lineno}: a code built at run time; write each one out")
    if isinstance(node, ast.IfExp):
        branches = [_strings(b, scopes) for b in (node.body, node.orelse)]
        return iter([s for b in branches if b is not None for s in b])
    if isinstance(node, ast.Name):
        found = [s for scope in scopes for s in _bound(node.id, scope, scopes)]
        return iter(found) if found else None
    return None


def _bound(name: str, scope: ast.AST, scopes: list[ast.AST]) -> Iterator[str]:
    for stmt in ast.walk(scope):
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:
            if isinstance(target, ast.Name) and target.id == name:
                yield from _strings(stmt.value, scopes) or ()
            elif isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
                for t, v in zip(target.elts, stmt.value.elts, strict=False):
                    if isinstance(t, ast.Name) and t.id == name:
                        yield from _strings(v, scopes) or ()


def _module_constants() -> ast.Module:
    """Every module-level ``NAME = "..."`` of the gateway, as one module to look names up in."""
    body: list[ast.stmt] = []
    for path in (ROOT / "gateway").rglob("*.py"):
        body += [s for s in ast.parse(path.read_text()).body if isinstance(s, ast.Assign)]
    return ast.Module(body=body, type_ignores=[])


def made_codes() -> dict[str, set[int | None]]:
    """Each code the gateway makes, with the statuses it is sent with where the source says."""
    codes: dict[str, set[int | None]] = {}
    constants = _module_constants()
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if "fake" in path.relative_to(ROOT / "gateway").parts:
            continue  # the fake upstream plays providers; its errors are theirs
        tree = ast.parse(path.read_text())
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            name = _name(call.func)
            if name not in MAKERS:
                continue
            code_at, status_at = MAKERS[name]
            code = call.args[code_at] if len(call.args) > code_at else next(
                (k.value for k in call.keywords if k.arg == "code"), None)
            status = call.args[status_at] if status_at is not None and len(call.args) > status_at else next(
                (k.value for k in call.keywords if k.arg == "status"), None)
            if code is None:  # the maker's default
                default = inspect.signature(outcome.bad_request).parameters["code"].default
                code = ast.Constant(Refusal("").code if name == "Refusal" else default)
            if name in FIXED_STATUS and status is None:
                status = ast.Constant(FIXED_STATUS[name])
            scopes = [f for f in functions if f.lineno <= call.lineno <= (f.end_lineno or 0)]
            found = _strings(code, [*scopes, tree, constants])
            number = status.value if isinstance(status, ast.Constant) else None
            for c in found or ():
                codes.setdefault(c, set()).add(number)
        # Error payloads a reader makes up for an upstream's broken stream (`"code": "..."`).
        for d in (n for n in ast.walk(tree) if isinstance(n, ast.Dict)):
            pairs = {k.value: v for k, v in zip(d.keys, d.values, strict=True) if isinstance(k, ast.Constant)}
            if "code" in pairs and isinstance(pairs.get("status"), ast.Constant):
                for c in _strings(pairs["code"], [tree, constants]) or ():  # a literal, or a constant's
                    codes.setdefault(c, set()).add(pairs["status"].value)  # type: ignore[union-attr]
    for status, code, _ in outcome._TRANSPORT_MESSAGES.values():
        codes.setdefault(code, set()).add(status)
    for kind in relay._TRANSPORT_TEXT:  # a stream under way ends with the transport failure's name
        codes.setdefault(kind.value, set()).add(None)
    return codes


def test_the_collector_finds_the_codes_it_is_meant_to() -> None:
    codes = made_codes()
    assert codes["pool_budget"] == {None} and codes["invalid_json"] == {400} and codes["request_timeout"] == {408}
    assert {"missing_client_key", "invalid_client_key", "circuit_open", "empty_stream", "untranslatable_request",
            "internal_error", "malformed_event", "gateway_shutdown", "stream_broken", "idle_timeout",
            "upstream_unreachable", "invalid_content_encoding"} <= set(codes)


def test_readme_error_contract_lists_every_code_the_gateway_makes_with_its_status() -> None:
    rows = [line for line in CONTRACT.splitlines() if line.startswith("| ")]
    for code, statuses in sorted(made_codes().items()):
        assert f"`{code}`" in CONTRACT, f"README's Error contract lacks `{code}`"
        for status in statuses - {None}:
            # The row's first cell is the status ("503 (529 on Messages, ...)").
            assert any(re.match(rf"\| {status}\b", r) and f"`{code}`" in r for r in rows), (code, status)
