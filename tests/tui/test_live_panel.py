"""The live panel renders only the end of what streams (bounded work per flush, however long the answer)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.widgets.transcript import LivePanel, preview_source
from tests.tui.conftest import SIZE, idle, ready, send


def test_a_short_block_is_previewed_whole() -> None:
    block = "A paragraph\nwith two lines."
    assert preview_source(block, rows=8, width=80) is block


def test_a_long_fence_keeps_its_opening_line_and_its_last_lines() -> None:
    code = [f"x{i} = {i}" for i in range(500)]
    block = "Here it is:\n```python\n" + "\n".join(code)
    preview = preview_source(block, rows=8, width=80).split("\n")
    assert preview[0] == "```python"
    assert preview[1:] == code[-8:]


def test_a_closed_fence_above_the_cut_is_not_reopened() -> None:
    block = "```sh\nls\n```\n" + "\n".join(f"line {i}" for i in range(50))
    preview = preview_source(block, rows=8, width=80)
    assert "```" not in preview
    assert preview.endswith("line 49")


def test_a_long_line_is_cut_to_what_the_rows_can_show() -> None:
    paragraph = " ".join(f"word{i}" for i in range(5000))
    preview = preview_source(paragraph, rows=8, width=60)
    assert paragraph.endswith(preview)
    assert len(preview) == 8 * 60


def test_plain_text_is_not_treated_as_markdown() -> None:
    text = "```\n" + "\n".join(str(i) for i in range(100))
    assert preview_source(text, rows=3, width=80, markdown=False) == "97\n98\n99"


@given(st.text(alphabet=st.sampled_from(list("ab `~\n#*-")), max_size=400), st.integers(1, 10), st.integers(1, 30))
def test_the_preview_always_ends_the_way_the_block_ends(block: str, rows: int, width: int) -> None:
    preview = preview_source(block, rows, width)
    last = block.split("\n")[-1]
    tail = preview.split("\n")[-1]
    assert last.endswith(tail)
    assert len(tail) >= min(len(last), width)  # never less than a full row of the last line
    assert len(preview) <= len(block) + len(block.split("\n")[0]) + 1  # at most a fence line added


@pytest.mark.anyio
async def test_the_panel_shows_the_end_of_a_huge_streaming_answer(tui_app) -> None:  # type: ignore[no-untyped-def]
    code = "\n".join(f"value_{i} = {i}" for i in range(1500))  # under the 8,192-token turn limit
    app = tui_app("Here:\n```python\n" + code + "\n```\n\nDone.", delay=0.0005)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "write it")
        panel = app.main.query_one(LivePanel)
        seen: list[str] = []

        async def watch() -> None:
            while app.busy or not seen:
                if panel.display and panel._lines:
                    seen.append("\n".join(strip.text for strip in panel._lines))
                await pilot.pause(0.05)

        await watch()
        await idle(pilot)
        assert seen, "the live panel never showed the stream"
        assert all(len(lines.split("\n")) <= LivePanel.LINES for lines in seen)
        assert any("value_" in lines for lines in seen)
        text = app.main.transcript.query("AssistantText").last()
        assert text.text_so_far.count("value_") == 1500  # the transcript keeps everything
