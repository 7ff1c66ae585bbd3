"""Every block the documentation marks runnable runs as printed.

The convention (docs/development.md, "Runnable examples"): an HTML comment
``<!-- runnable -->`` on the line before a fenced block, invisible on the site. It may carry
``expect="..."`` (the output must contain it, case-insensitively; several allowed) and
``absent="..."`` (the output must not).

- A ``yaml`` block is loaded through the gateway's own config loader, every ``${VAR}`` it reads
  set to a value of its own. A block without ``upstreams`` is a section of a config: it is
  loaded under one minimal upstream. It must load without a start-up warning.
- A ``sh`` block is run by bash against real processes, as a reader at a terminal would: its
  ``python -m gateway.fake ...`` line starts the fake upstream (with those options), its
  ``make run [CONFIG=...]`` line starts the gateway as ``make run`` does
  (``python -m gateway --config CONFIG``; without such a line, ``config/gateway.yaml``, whose
  upstream is the fake), each on a free port; every other line runs with the gateway's
  address in place of ``127.0.0.1:8080``.

Also here: the statements of the docs that a test must hold and that no generated page covers
(the tool-output defaults, a fallback chain across APIs).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gateway.config import GatewayConfig, config_warnings, parse_config
from tests.procs import ROOT, base_env, free_port, start

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
MARKED = re.compile(r"^<!-- runnable(?P<attrs>[^>]*?)-->\n```(?P<lang>\w+)[^\n]*\n(?P<body>.*?)^```", re.S | re.M)
ATTR = re.compile(r'(\w+)="([^"]*)"')
MINIMAL = "upstreams: [{name: minimal, base_url: 'http://127.0.0.1:9/v1'}]\n"
GATEWAY_ADDR = "127.0.0.1:8080"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str
    expect: tuple[str, ...]
    absent: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def runnable_blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in MARKED.finditer(text):
            attrs = ATTR.findall(m.group("attrs"))
            found.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group("lang"), m.group("body"),
                               tuple(v for k, v in attrs if k == "expect"),
                               tuple(v for k, v in attrs if k == "absent")))  # fmt: skip
    return found


BLOCKS = runnable_blocks()
YAML_BLOCKS = [b for b in BLOCKS if b.lang == "yaml"]
SHELL_BLOCKS = [b for b in BLOCKS if b.lang in ("sh", "bash")]


def test_the_convention_is_used_and_only_on_what_this_test_runs() -> None:
    assert len(YAML_BLOCKS) >= 8 and len(SHELL_BLOCKS) >= 4
    assert {b.lang for b in BLOCKS} <= {"yaml", "sh", "bash"}
    # A marker this test's pattern misses (a typo, a blank line before the fence) would be a
    # block nobody runs: every marker must be one the pattern found.
    markers = sum(len(re.findall(r"^<!-- runnable", p.read_text(), re.M)) for p in PAGES)
    assert markers == len(BLOCKS)


SHAPED = {"REDIS_URL": "redis://127.0.0.1:6379/0"}  # variables the loader checks the form of


def _env_for(text: str) -> dict[str, str]:
    return {var: SHAPED.get(var, f"{var.lower()}-value") for var in re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text)}


def load_block(block: Block) -> GatewayConfig:
    text = block.body
    if "upstreams" not in (yaml.safe_load(text) or {}):
        text = MINIMAL + text
    return parse_config(text, env=_env_for(text))


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[b.id for b in YAML_BLOCKS])
def test_a_runnable_config_loads_through_the_gateways_loader(block: Block) -> None:
    cfg = load_block(block)
    assert config_warnings(cfg) == []


# --- shell blocks, against real processes ---------------------------------------------------


@dataclass
class Setup:
    fake_args: list[str]
    config: str
    env: dict[str, str]
    script: str


def split_setup(body: str) -> Setup:
    fake_args: list[str] = []
    config, env, kept = "config/gateway.yaml", {}, []
    for line in body.splitlines():
        if line.startswith("python -m gateway.fake"):
            fake_args = shlex.split(line, comments=True)[3:]
            continue
        if re.match(r"([A-Z_]+=\S+ )*make run\b", line):
            words = shlex.split(line, comments=True)
            i = words.index("make")
            env = dict(w.split("=", 1) for w in words[:i])
            config = dict(w.split("=", 1) for w in words[i + 2:] if "=" in w).get("CONFIG", config)
            continue
        kept.append(line)
    return Setup(fake_args, config, env, "\n".join(kept) + "\n")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Any]:
    procs = []

    def run(setup: Setup) -> str:
        fake_port, gw_port = free_port(), free_port()
        fake = start([sys.executable, "-m", "gateway.fake", *setup.fake_args, "--port", str(fake_port)],
                     base_env(), fake_port, tmp_path / "fake.log", ready_path="/v1/models")
        procs.append(fake)
        env = base_env(**setup.env, GATEWAY_PORT=str(gw_port), UPSTREAM_BASE_URL=f"http://127.0.0.1:{fake_port}/v1")
        procs.append(start([sys.executable, "-m", "gateway", "--config", str(ROOT / setup.config)], env, gw_port,
                           tmp_path / "gateway.log"))
        return f"127.0.0.1:{gw_port}"

    yield run
    for p in reversed(procs):
        p.stop()


@pytest.mark.e2e
@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.id for b in SHELL_BLOCKS])
def test_a_runnable_shell_block_runs_against_the_fake_upstream(block: Block, running: Any) -> None:
    setup = split_setup(block.body)
    addr = running(setup)
    script = setup.script.replace(GATEWAY_ADDR, addr)
    assert addr in script, "a runnable block must talk to the gateway"
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=90,
                          cwd=ROOT, env=base_env())
    out = done.stdout.lower()
    assert done.returncode == 0, (done.stdout, done.stderr)
    for want in block.expect:
        assert want.lower() in out, (want, done.stdout)
    for unwanted in block.absent:
        assert unwanted.lower() not in out, (unwanted, done.stdout)


def test_the_setup_lines_are_read_as_make_run_reads_them() -> None:
    s = split_setup("python -m gateway.fake --limited k   # terminal 1\n"
                    "UPSTREAM_APIS=chat make run CONFIG=config/examples/fake.yaml   # terminal 2\ncurl x\n")
    assert (s.fake_args, s.config, s.env, s.script) == (["--limited", "k"], "config/examples/fake.yaml",
                                                        {"UPSTREAM_APIS": "chat"}, "curl x\n")  # fmt: skip
    assert split_setup("curl y\n").config == "config/gateway.yaml"


# --- statements the docs make that a test holds ---------------------------------------------


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def config_default(path: str) -> Any:
    """The default of a dotted config key (``rules[].oversized``: a field of a list's items)."""
    model: type[BaseModel] | None = GatewayConfig
    *parents, last = path.split(".")
    for part in parents:
        assert model is not None, path
        model = _model_of(model.model_fields[part.removesuffix("[]")].annotation)
    assert model is not None, path
    default = model.model_fields[last].get_default(call_default_factory=True)
    return list(default) if isinstance(default, tuple) else default


def stated_defaults(page: Path, name: str) -> dict[str, Any]:
    text = page.read_text()
    table = text[text.index(f"<!-- defaults: {name} -->"):].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([a-z_.\[\]]+)` \| `([^`]*)` \|", table, re.M)
    return {key: yaml.safe_load(value) for key, value in rows}


def test_the_tool_outputs_page_states_the_config_models_defaults() -> None:
    stated = stated_defaults(DOCS / "tool-outputs.md", "tool_outputs")
    assert {k for k in stated if k.startswith("tool_outputs.") and "[]" not in k} == {
        f"tool_outputs.{f}" for f in GatewayConfig.model_fields["tool_outputs"].annotation.model_fields}  # type: ignore[union-attr]
    for key, value in stated.items():
        assert config_default(key) == value, key


def test_the_fallbacks_page_chain_crosses_apis_as_it_says() -> None:
    from gateway.app import create_app
    from gateway.live import LIVE

    (block,) = [b for b in YAML_BLOCKS if b.page == DOCS / "errors" / "fallbacks.md"]
    app = create_app(load_block(block), sender=object())  # type: ignore[arg-type]  # routing sends nothing
    route = app[LIVE].services.chain_for("claude-sonnet-4-5")
    assert route is not None
    assert [(u.cfg.name, tuple(u.cfg.apis or ())) for u in route.upstreams] == [("anthropic", ("messages",)),
                                                                               ("local", ("chat",))]  # fmt: skip


def test_the_error_contract_page_lists_every_header_the_gateway_stamps() -> None:
    """The page presents itself as the list of ``x-llm-*`` headers; two the gateway sends
    (``x-llm-translated``, ``x-llm-estimated``) were stated only on other pages."""
    sent = {m for path in (ROOT / "gateway").rglob("*.py")
            for m in re.findall(r'"(x-llm-[a-z0-9-]+)', path.read_text())}  # fmt: skip
    page = (DOCS / "errors" / "index.md").read_text()
    assert sent and {h for h in sent if f"`{h}`" not in page} == set()
