"""Bounded rendering work while the model streams, however long the answer grows.

The live panel renders only the end of what streams; finished blocks move into the transcript in
steps of a few dozen lines, long code fences cut into pieces.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.widgets.transcript import PIECE_LINES, AssistantText, LivePanel, block_pieces, preview_source
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


def test_an_opening_fence_cut_to_the_last_row_is_not_repeated_above_it() -> None:
    # hypothesis found it: the fence line, cut to the width, was added again in full above its own tail
    assert preview_source("\n```", rows=1, width=2) == "``"


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


def test_a_long_fence_is_cut_into_fences_of_the_same_language() -> None:
    code = [f"x{i} = {i}" for i in range(100)]
    block = "```python\n" + "\n".join(code) + "\n```"
    pieces = block_pieces(block, max_lines=30)
    assert len(pieces) == 4
    inner: list[str] = []
    for piece in pieces:
        lines = piece.split("\n")
        assert lines[0] == "```python" and lines[-1] == "```"
        assert len(lines) <= 30 + 2
        inner += lines[1:-1]
    assert inner == code


def test_prose_and_short_blocks_are_never_cut() -> None:
    paragraph = "\n".join(f"line {i} of one paragraph" for i in range(100))
    assert block_pieces(paragraph, max_lines=30) == [paragraph]
    assert block_pieces("```\nx\n```", max_lines=30) == ["```\nx\n```"]


@pytest.mark.anyio
async def test_a_long_fence_settles_in_steps_and_reads_as_one(tui_app) -> None:  # type: ignore[no-untyped-def]
    code = [f"value_{i} = {i}" for i in range(200)]
    app = tui_app("Here:\n\n```python\n" + "\n".join(code) + "\n```\n\nDone.")
    steps: list[int] = []
    step = AssistantText._settle_step

    def counting_step(self: AssistantText) -> None:
        waiting = list(self.queued)
        step(self)
        moved = waiting[: len(waiting) - len(self.queued)]
        steps.append(sum(source.count("\n") + 1 for source, _ in moved))  # source lines this frame renders

    AssistantText._settle_step = counting_step  # type: ignore[method-assign]
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "show it")
            await idle(pilot)
            text = app.main.transcript.query(AssistantText).last()
            await pilot.pause(0.05)
            while text.settling:
                await pilot.pause(0.05)
            assert max(steps) <= AssistantText.SETTLE_LINES + PIECE_LINES + 2
            assert len(steps) > 1  # the fence did not land in one frame
            rows = [strip.text.strip() for strip in text.lines_for(text.size.width)]
            shown = [row for row in rows if row.startswith("value_")]
            assert shown == code  # every line, in order
            first, last = rows.index(code[0]), rows.index(code[-1])
            assert last - first == len(code) - 1  # no gap where the pieces meet
            assert rows[-1] == "Done."
    finally:
        AssistantText._settle_step = step  # type: ignore[method-assign]


@pytest.mark.anyio
async def test_old_entries_leave_the_layout_and_come_back_on_scrolling_up(tui_app) -> None:  # type: ignore[no-untyped-def]
    from app.widgets.transcript import Notice

    app = tui_app("Hello.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        transcript = app.main.transcript
        transcript.SHOWN_MAX, transcript.REVEAL = 10, 4
        for i in range(25):
            await transcript.add_notice(f"entry {i}" + "\n." * 4)  # tall enough to scroll
            await pilot.pause(0.01)
        entries = list(transcript.query(Notice).exclude("EarlierEntries"))
        shown = [str(n.render()).split("\n")[0] for n in entries if n.display]
        assert 10 <= len(shown) < 10 + 4
        assert shown[-1] == "entry 24"  # the newest stay; the oldest went
        assert not entries[0].display
        assert transcript.earlier.display and f"{25 - len(shown)} earlier" in str(transcript.earlier.render())

        transcript.scroll_home(animate=False)
        for _ in range(100):  # the view is put back after a refresh: later on a loaded machine (CI)
            await pilot.pause(0.05)
            if transcript.scroll_y > 0:
                break
        shown_after = [n for n in entries if n.display]
        assert len(shown_after) == len(shown) + 4  # one batch came back, just above the others
        assert [str(n.render()).split("\n")[0] for n in shown_after][-len(shown):] == shown
        assert transcript.scroll_y > 0  # the view stayed on what the user was reading

        # Reading further up: nothing is hidden under the user while new entries arrive.
        await transcript.add_notice("entry 25")
        await pilot.pause(0.05)
        assert len([n for n in transcript.query(Notice).exclude("EarlierEntries") if n.display]) == len(shown_after) + 1
