"""Hole 7 in the TUI: Rich and Textual pass ESC, C1 controls and bidi overrides straight to the
terminal, so every widget that shows model-chosen text must get it escaped. Checked on what the
screen would draw (the screenshot export renders the same segments the terminal receives)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from app.app import make_app
from app.screens.bash import BashApprovalScreen
from app.screens.review import EditReviewScreen
from app.widgets.transcript import ToolCard
from tests.conftest import xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil"
SHOWN = "\\x1b]0;pwned\\a\\x1b[2J\\x9b31m\\u202eevil"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def screen_text(app) -> str:  # type: ignore[no-untyped-def]
    """The screen as the terminal would get it: a screenshot's text runs, concatenated in order."""
    svg = app.export_screenshot()
    assert_clean(svg)  # raw control characters would be in the SVG as they are
    return "".join(html.unescape(run) for run in re.findall(r">([^<]*)</text>", svg)).replace("\u00a0", " ")


def assert_clean(text: str) -> None:
    assert not RAW.search(text), sorted({hex(ord(c)) for c in RAW.findall(text)})


async def test_tui_shows_model_text_escaped_everywhere(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    (repo / "notes.txt").write_text(f"notes {ESCAPES}\n")
    replay = replay_file(
        f"<think>plan {ESCAPES}</think>Hello {ESCAPES}\n" + xml_call("Read", file_path="notes.txt"),
        xml_call("Bash", command="rm -f notes.txt; : '\r\x1b[2K\x1b[1A? ls -la'", description=f"look {ESCAPES}"),
        xml_call("Write", file_path=f"n{ESCAPES}.txt", content=f"new {ESCAPES}\n"),
        f"<tool_call>\n<function=Bad{ESCAPES}>\n</function>\n</tool_call>",
        f"Done {ESCAPES}",
    )
    app = make_app(repo, f"replay:{replay}", mode="ask")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "go")
        bash = await wait_for(pilot, lambda: isinstance(app.screen, BashApprovalScreen) and app.screen, what="bash approval")
        await pilot.pause(0.1)
        shot = screen_text(app)
        assert "$ rm -f notes.txt; : '\\r\\x1b[2K\\x1b[1A? ls -la'" in shot and f"look {SHOWN}" in shot
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="edit review")
        await pilot.pause(0.1)
        shot = screen_text(app)
        assert f"n{SHOWN}.txt" in shot and f"new {SHOWN}" in shot
        await pilot.press("n")
        await pilot.press("enter")
        await idle(pilot)
        assert bash.request.command.startswith("rm -f notes.txt; : '\r\x1b")  # what runs is unchanged
        shot = screen_text(app)
        assert f"Done {SHOWN}" in shot and f"Bad{SHOWN}" in shot
        cards = list(app.main.transcript.query(ToolCard))
        for card in cards:
            card.expanded = True
            text = "\n".join(line.text for line in card.build_lines(SIZE[0]))
            assert_clean(text)
        read_card = "\n".join(line.text for line in cards[0].build_lines(SIZE[0]))
        assert f"notes {SHOWN}" in read_card
    assert (repo / "notes.txt").exists() and not list(repo.glob("n\x1b*"))
