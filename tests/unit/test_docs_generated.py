"""The generated reference pages (docs/reference/, `python -m gateway.docs_gen`) say what the
source says: they are up to date, every config key is on the configuration page with its
description, no config field lacks one, and every metric the app registers is on the metrics page.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from gateway import config
from gateway.docs_gen import PAGES, PAGES_DIR, all_sections, render_all, stale
from gateway.docs_gen import configuration as config_page
from gateway.docs_gen import metrics as metrics_page
from gateway.docs_gen.__main__ import main
from gateway.docs_gen.markdown import COMMAND, cell

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return render_all()


def _models() -> list[type[BaseModel]]:
    return [m for m in vars(config).values()
            if isinstance(m, type) and issubclass(m, BaseModel) and m.__module__ == config.__name__]  # fmt: skip


def test_the_committed_pages_are_what_the_source_says() -> None:
    diffs = stale(ROOT)
    assert not diffs, f"run `{COMMAND}` and commit docs/reference/:\n" + "\n".join(diffs)[:4000]


def _with_hand_written_pages(root: Path) -> None:
    """Copy the hand-written pages that hold generated sections under ``root``: the command fills
    their sections in, it does not make the pages."""
    for section in all_sections():
        (root / section.path).parent.mkdir(parents=True, exist_ok=True)
        (root / section.path).write_text((ROOT / section.path).read_text())


def test_check_exits_1_naming_a_stale_page_and_0_once_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _with_hand_written_pages(tmp_path)
    assert main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "docs/reference/configuration.md (committed)" in out.out and "out of date" in out.err
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0
    page = tmp_path / PAGES_DIR / "metrics.md"
    page.write_text(page.read_text().replace("llm_gateway_requests_total", "llm_gateway_requests"))
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert "-| `llm_gateway_requests` |" in capsys.readouterr().out


def test_the_rendering_is_deterministic(pages: dict[str, str]) -> None:
    assert render_all() == pages


def test_each_page_says_it_is_generated_and_by_which_command(pages: dict[str, str]) -> None:
    assert set(pages) == set(PAGES) == {"configuration.md", "metrics.md", "errors.md", "prices.md"}
    for text in pages.values():
        first, _, rest = text.partition("\n")
        assert first.startswith("<!--") and COMMAND in first and rest.startswith("# ")


def test_no_config_field_lacks_a_description() -> None:
    missing = [f"{m.__name__}.{name}" for m in _models() for name, f in m.model_fields.items()
               if not (f.description or "").strip()]  # fmt: skip
    assert missing == [], f"give these Field(description=...): {', '.join(missing)}"


def test_every_config_field_is_on_the_configuration_page_with_its_description(pages: dict[str, str]) -> None:
    page = pages["configuration.md"]
    keys = list(config_page.keys())
    paths = {k.path for k in keys}
    for model in _models():
        for name, field in model.model_fields.items():
            # Every field is reached from GatewayConfig, under some path ending in its name.
            assert any(p.rsplit(".", 1)[-1].removesuffix("[]") == name for p in paths), f"{model.__name__}.{name}"
            assert cell(field.description or "") in page, f"{model.__name__}.{name}'s description"
    for key in keys:
        assert f"`{key.path}`" in page or key.path in page.split("## ", 1)[1], key.path
    assert "| `upstreams[].apis`<br>" in page and "| `prices.<glob>.input`<br>" in page
    assert "| `retry.rate_limit.max_retries`<br>int, ≥ 0, ≤ 100<br>default `3` |" in page  # the section's own default
    assert "| `server.drain_s`<br>seconds (float), ≥ 0<br>default `30.0` |" in page
    assert "| `upstreams[].name`<br>string, at least 1<br>required |" in page


def test_every_section_has_its_heading(pages: dict[str, str]) -> None:
    for name in config.GatewayConfig.model_fields:
        assert f"\n## `{name}`\n" in pages["configuration.md"], name


def test_every_registered_metric_is_on_the_metrics_page(pages: dict[str, str]) -> None:
    registry = metrics_page.registry_of_app()
    families = {f.name: f for f in registry.collect()}
    assert len(families) >= 25  # the whole app's, not one module's
    page = pages["metrics.md"]
    for family in families.values():
        exposed = family.name + ("_total" if family.type == "counter" else "")
        row = next((r for r in page.splitlines() if r.startswith(f"| `{exposed}` |")), None)
        assert row is not None, f"{exposed} is not on docs/reference/metrics.md"
        assert f"| {family.type} |" in row and cell(family.documentation) in row
    assert "| `llm_gateway_requests_total` | counter | `upstream`, `model`, `status`, `error_type` |" in page
    assert "| `llm_gateway_workers_reporting` | gauge |" in page  # added only by a merge of workers


def test_every_shipped_price_is_on_the_prices_page_in_the_order_tried(pages: dict[str, str]) -> None:
    """docs/keys.md and the agents' pages quoted shipped prices by hand; they link here now."""
    from gateway.docs_gen.prices import _usd
    from gateway.keys.prices import SHIPPED

    rows = [line for line in pages["prices.md"].splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == [glob for glob, _ in SHIPPED]
    for row, (_, price) in zip(rows, SHIPPED, strict=True):
        assert row.split(" | ")[1:3] == [_usd(price.input), _usd(price.output)]


# --- generated sections of hand-written pages (gateway/docs_gen/sections.py) -----------------


def test_a_stale_section_is_named_with_a_diff_and_rewritten_between_its_markers_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--root", str(tmp_path)])  # the reference pages; the sections' pages are missing
    assert "chat_messages.md: no such page" in capsys.readouterr().err
    _with_hand_written_pages(tmp_path)
    assert main(["--check", "--root", str(tmp_path)]) == 0
    page = tmp_path / "docs/translation/chat_messages.md"
    before = page.read_text()
    edited = before.replace("| `claude-opus-4` | 32,000 |", "| `claude-opus-4` | 64,000 |")
    page.write_text(edited.replace("# Chat completions client", "# A retitled page"))
    assert main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "docs/translation/chat_messages.md (committed)" in out and "-| `claude-opus-4` | 64,000 |" in out
    assert main(["--root", str(tmp_path)]) == 0
    assert page.read_text() == before.replace("# Chat completions client", "# A retitled page")


def test_a_page_that_lost_its_markers_fails_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--root", str(tmp_path)])
    _with_hand_written_pages(tmp_path)
    page = tmp_path / "docs/translation/chat_gemini.md"
    page.write_text(page.read_text().replace("<!-- /generated: effort-budgets -->", ""))
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert "no '<!-- generated: effort-budgets" in capsys.readouterr().out
    assert main(["--root", str(tmp_path)]) == 1


def test_the_translation_tables_are_read_from_the_constants_the_translators_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.docs_gen import translation
    from gateway.translate.chat_messages import request as chat_messages_request

    sections = {(s.page, s.name): s for s in all_sections()}
    assert len(sections) == len(all_sections())  # one section per name and page
    monkeypatch.setattr(chat_messages_request, "EFFORT_BUDGET", {"minimal": 1, "low": 2, "medium": 3,
                                                                 "high": 4, "xhigh": 5})  # fmt: skip
    assert "| `xhigh` | 5 | `xhigh` |" in translation.chat_messages_effort()
    monkeypatch.setitem(translation.MESSAGES_TO_CHAT_FINISH, "new_reason", "length")
    assert "| `max_tokens`, `model_context_window_exceeded`, `new_reason` | `length` |" in (
        translation.chat_messages_finish_reason())
