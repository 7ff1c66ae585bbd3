"""``docs/reference/configuration.md``: every key of the config file, from the pydantic models.

The models are walked from :class:`~gateway.config.GatewayConfig`: each key is written as its
YAML path (``server.port``, ``upstreams[].apis``, ``prices.<glob>.input``), its type as a reader
would write it, its default as YAML and its ``Field(description=...)``. A nested section's keys
take their defaults from the section's own default, as loading a file does.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from gateway.config import GatewayConfig
from gateway.docs_gen.markdown import cell, generated_header

# What a key's name says its number counts, by suffix (the config's naming rule).
_UNITS = (("_per_s", "per second"), ("_s", "seconds"), ("_ms", "milliseconds"), ("_bytes", "bytes"),
          ("_tokens", "tokens"),
          ("usd", "USD"), ("_share", "share"), ("ratio", "share"))  # fmt: skip
# The name of each item of a mapping section, by its key.
_MAP_KEY = {"prices": "glob"}
REQUIRED = "required"


@dataclass(frozen=True)
class Key:
    path: str  # `server.port`
    type: str
    default: str  # YAML, or "required"; empty for a section whose keys follow
    description: str


def _bounds(metadata: list[Any]) -> str:
    words = []
    for m in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(m, attr, None)
            if value is not None:
                words.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
        if isinstance(m, annotated_types.MinLen) and m.min_length:
            words.append(f"at least {m.min_length}")
        if isinstance(m, annotated_types.MaxLen):
            words.append(f"at most {m.max_length} characters")
    return ", ".join(words)


def _plain(tp: Any) -> str:
    """A type in a reader's words, without its bounds."""
    if typing.get_origin(tp) is Annotated:
        inner, *meta = typing.get_args(tp)
        bounds = _bounds([c for m in meta for c in [m, *getattr(m, "metadata", ())]])
        return f"{_plain(inner)} ({bounds})" if bounds else _plain(inner)
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        text = " or ".join(_plain(o) for o in options)
        return f"{text} or null" if len(options) < len(typing.get_args(tp)) else text
    if typing.get_origin(tp) is Literal:
        return " | ".join(f'`"{a}"`' for a in typing.get_args(tp))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and args and args[-1] is Ellipsis:
        item = args[0]
        if typing.get_origin(item) is tuple and len(typing.get_args(item)) == 2:
            k, v = typing.get_args(item)  # written as a mapping, kept in order (first match wins)
            return f"mapping of {_plain(k)} to {_plain(v)}"
        return f"list of {_plain(item)}".replace("of section", "of sections")
    if origin is dict:
        return f"mapping of {_plain(args[0])} to {_plain(args[1])}".replace("to section", "to sections")
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "section"
    return {str: "string", int: "int", float: "float", bool: "bool"}.get(tp, getattr(tp, "__name__", str(tp)))


def type_text(name: str, info: FieldInfo) -> str:
    text = _plain(info.annotation)
    unit = next((u for suffix, u in _UNITS if name.endswith(suffix)), None)
    if unit is not None and text.split(" ")[0] in ("int", "float"):
        text = f"{unit} ({text})"
    bounds = _bounds(info.metadata)
    return f"{text}, {bounds}" if bounds else text


def _data(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return {k: _data(v) for k, v in value}
    if isinstance(value, tuple | list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _data(v) for k, v in value}
        return [_data(v) for v in value]
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items()}
    return value


def yaml_text(value: Any) -> str:
    text = yaml.safe_dump(_data(value), default_flow_style=True, width=10_000, sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...")


def _model_of(tp: Any) -> tuple[str, type[BaseModel]] | None:
    """The section a key holds, and how its path goes on: ``.`` (one section), ``[].`` (a list of
    them) or ``.<name>.`` (a mapping of them)."""
    union = isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union
    for option in (a for a in (typing.get_args(tp) if union else (tp,)) if a is not type(None)):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return ".", option
        origin, args = typing.get_origin(option), typing.get_args(option)
        if origin is tuple and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            return "[].", args[0]
        if origin is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            return ".<{}>.", args[1]
    return None


def keys(model: type[BaseModel] = GatewayConfig, prefix: str = "", defaults: Any = None) -> Iterator[Key]:
    """Every key under ``model``, depth first in the order the models declare them."""
    for name, info in model.model_fields.items():
        path = prefix + name
        if defaults is not None:
            default: Any = getattr(defaults, name)
        elif info.default_factory is not None:
            default = info.default_factory()  # type: ignore[call-arg]
        else:
            default = info.default
        nested = _model_of(info.annotation)
        if default is PydanticUndefined:
            shown = REQUIRED
        elif isinstance(default, BaseModel):
            shown = ""  # its keys follow, each with its default
        elif default in ((), {}) and "mapping" in _plain(info.annotation).split(" ")[0]:
            shown = "{}"  # an empty mapping written as YAML writes one, though kept as pairs
        else:
            shown = yaml_text(default)
        yield Key(path, type_text(name, info), shown, info.description or "")
        if nested is not None:
            joint, section = nested
            inner = default if isinstance(default, BaseModel) else None
            yield from keys(section, path + joint.format(_MAP_KEY.get(name, "name")), inner)


def render() -> str:
    out = [
        generated_header(),
        "# Configuration reference",
        "",
        "Every key of the gateway's YAML config file, with its type, its default and what it does. "
        "A key left out takes its default; a list of one may be written as a string; unknown keys "
        "are errors. `${VAR}`, `${VAR:-default}` and `${VAR:?why}` are read from the environment; "
        "any other `${` is refused.",
    ]
    sections: dict[str, list[Key]] = {}
    for key in keys():
        sections.setdefault(key.path.split(".")[0].split("[")[0], []).append(key)
    for section, rows in sections.items():
        top = rows[0]
        out += ["", f"## `{section}`", "", top.description, ""]
        # Two columns, the type and default under the key: four columns left the descriptions,
        # the longest text, a narrow strip (docs/stylesheets/extra.css keeps the key unbroken).
        out += ["| key, type, default | description |", "| --- | --- |"]
        for k in rows:
            if k.path == section and k.type == "section":
                continue  # the heading and its paragraph say it
            under = [cell(k.type)]
            if k.default == REQUIRED:
                under.append(REQUIRED)
            elif k.default:
                under.append(cell(f"default `{k.default}`"))
            out.append(f"| `{k.path}`<br>{'<br>'.join(under)} | {cell(k.description)} |")
    return "\n".join(out) + "\n"
