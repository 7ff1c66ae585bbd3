"""Configuration: one YAML file, frozen pydantic models, secrets from the environment.

Every key has a default, so a file that names one upstream is complete. Unknown keys
are errors: a typo must not be silently ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class ConfigError(Exception):
    """A config problem, worded for a one-line message that names the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    drain_s: float = Field(default=30.0, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"


class UpstreamConfig(_Model):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    base_url: str
    api_key: str | None = Field(default=None, repr=False)
    models: tuple[str, ...] = ("*",)
    context_window: int | None = Field(default=None, gt=0)
    max_connections: int = Field(default=256, gt=0)
    # Ask streams for their usage chunk (stream_options.include_usage) to count tokens;
    # turn off for a server that rejects the option.
    stream_usage: bool = True

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query string or fragment")
        return v.rstrip("/")

    @field_validator("api_key")
    @classmethod
    def _blank_key_is_none(cls, v: str | None) -> str | None:
        # `api_key: ${OPENAI_API_KEY:-}` with the variable unset means "forward the client's".
        return v or None

    @field_validator("models")
    @classmethod
    def _non_empty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("must list at least one model pattern")
        return v


class RetryClassConfig(_Model):
    max_retries: int = Field(ge=0, le=100)
    base_delay_s: float = Field(gt=0)
    max_delay_s: float = Field(gt=0)


class RetryBudgetConfig(_Model):
    ttl_s: float = Field(default=10.0, gt=0)
    min_retries_per_s: float = Field(default=10.0, ge=0)
    percent_can_retry: float = Field(default=20.0, ge=0, le=100)


class RetryConfig(_Model):
    rate_limit: RetryClassConfig = RetryClassConfig(max_retries=3, base_delay_s=1.0, max_delay_s=20.0)
    provider_unavailable: RetryClassConfig = RetryClassConfig(
        max_retries=5, base_delay_s=0.5, max_delay_s=10.0
    )
    max_retry_after_s: float = Field(default=30.0, ge=0)
    deadline_s: float = Field(default=600.0, gt=0)
    budget: RetryBudgetConfig = RetryBudgetConfig()


class CircuitBreakerConfig(_Model):
    failure_threshold: int = Field(default=5, gt=0)
    open_s: float = Field(default=30.0, gt=0)


class TimeoutsConfig(_Model):
    connect_s: float = Field(default=10.0, gt=0)
    first_byte_s: float = Field(default=300.0, gt=0)
    idle_s: float = Field(default=120.0, gt=0)


class CompressionConfig(_Model):
    enabled: bool = True
    # Clients that summarise their own conversation when told it is too long (Claude Code,
    # Codex) keep more meaning that way than our truncation does, and a silent rescue would
    # let their local history grow without bound. `pass_through` hands them the provider's
    # overflow untouched; `rescue` treats them like every other client.
    self_compacting_clients: Literal["pass_through", "rescue"] = "pass_through"


class GatewayConfig(_Model):
    server: ServerConfig = ServerConfig()
    upstreams: tuple[UpstreamConfig, ...] = Field(min_length=1)
    retry: RetryConfig = RetryConfig()
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()
    timeouts: TimeoutsConfig = TimeoutsConfig()
    compression: CompressionConfig = CompressionConfig()

    @field_validator("upstreams")
    @classmethod
    def _unique_names(cls, v: tuple[UpstreamConfig, ...]) -> tuple[UpstreamConfig, ...]:
        names = [u.name for u in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"upstream names must be unique, repeated: {', '.join(dupes)}")
        return v


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}``; an unset ``${VAR}`` without default is an error."""

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        value = env.get(name)
        if value:
            return value
        if default is not None:
            return default
        if name in env:
            return ""
        raise ConfigError(f"environment variable {name} is not set (use ${{{name}:-default}})")

    return _VAR.sub(sub, text)


def _expand_tree(node: Any, env: Mapping[str, str]) -> Any:
    # Expanding after YAML parsing keeps a secret containing ':' or '#' from changing the YAML.
    if isinstance(node, str):
        return expand_env(node, env)
    if isinstance(node, list):
        return [_expand_tree(x, env) for x in node]
    if isinstance(node, dict):
        return {k: _expand_tree(v, env) for k, v in node.items()}
    return node


def _field_path(loc: tuple[int | str, ...], data: Any) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "config"


def _describe(err: ValidationError, data: Any) -> str:
    first = err.errors()[0]
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling against the config reference)"
    elif first["type"] == "missing":
        msg = "is required"
    elif first["type"] == "too_short":
        msg = f"must have at least {first.get('ctx', {}).get('min_length', 1)} item(s)"
    msg = msg.removeprefix("Value error, ")
    more = len(err.errors()) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{_field_path(tuple(first['loc']), data)}: {msg}{tail}"


def parse_config(text: str, env: Mapping[str, str] | None = None, source: str = "config") -> GatewayConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    data = _expand_tree(data, os.environ if env is None else env)
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_describe(e, data)) from None


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except IsADirectoryError:
        raise ConfigError(f"config path is a directory, not a file: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {p}: {e}") from None
    return parse_config(text, env, source=str(p))
