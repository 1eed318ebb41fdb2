"""Snapshot tests (pytest-textual-snapshot) of the main screen and of the diff review.

Stable by construction: fixed terminal size, fixed repo and model names, no sandbox probe
(`no_sandbox=True`), and a replay model whose speed figures do not depend on the clock.
Update with `python -m pytest tests/tui/test_snapshots.py --snapshot-update` and review the SVGs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from app.app import make_app
from app.screens.review import EditReviewScreen
from models.base import Chunk, GenerationRequest, TurnEnd
from models.replay import ReplayModel
from tests.conftest import xml_call
from tests.tui.conftest import idle, ready, send, wait_for

READ_CALC = xml_call("Read", file_path="calc.py")
FIX_ADD = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")


class SteadyReplay(ReplayModel):
    """Replay whose usage says 20 tokens/s whatever the clock did, and whose context figure does
    not move when someone edits the system prompt."""

    def context_used(self) -> int:
        return 1000 * self.position

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        for chunk in super().generate(request):
            if isinstance(chunk, TurnEnd):
                usage = chunk.usage.model_copy(update={"decode_s": chunk.usage.completion_tokens / 20.0, "prefill_s": 0.0})
                chunk = replace(chunk, usage=usage)
            yield chunk


def steady_app(repo: Path, replay_file, *turns: str):  # type: ignore[no-untyped-def]
    return make_app(repo, SteadyReplay(replay_file(*turns, name="session.jsonl")), no_sandbox=True)


def test_main_screen_after_a_session(snap_compare, repo: Path, replay_file) -> None:
    app = steady_app(
        repo, replay_file,
        "<think>The test expects 5 for add(2, 3).</think>Let me look at **calc.py**.\n" + READ_CALC,
        "`add` subtracts; fixing it.\n" + FIX_ADD,
        "Fixed: `add` now returns `a + b`.\n\n- calc.py: one line changed",
    )

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await ready(pilot)
        await send(pilot, "make test_calc pass")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="review")
        await pilot.press("y")
        await idle(pilot)

    assert snap_compare(app, terminal_size=(100, 40), run_before=run_before)


def _two_hunk_repo(repo: Path) -> str:
    body = ["import math\n", "\n", "\n", "def area(r):\n", "    return 3.14 * r * r\n"]
    body += ["\n"] * 2 + [f"# filler {i}\n" for i in range(8)]
    body += ["def greet(name):\n", "    print('hello ' + name)\n"]
    (repo / "shapes.py").write_text("".join(body))
    new = list(body)
    new[4] = "    return math.pi * r * r\n"
    new[-1] = "    print(f'hello {name}')\n"
    new.append("    return name\n")
    return "".join(new)


def test_diff_review_with_a_skipped_hunk(snap_compare, repo: Path, replay_file) -> None:
    content = _two_hunk_repo(repo)
    app = steady_app(
        repo, replay_file, xml_call("Read", file_path="shapes.py"), xml_call("Write", file_path="shapes.py", content=content)
    )

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await ready(pilot)
        await send(pilot, "use math.pi and an f-string")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="review")
        await pilot.press("j", "space")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 36), run_before=run_before)


def test_diff_review_side_by_side_on_wide_terminal(snap_compare, repo: Path, replay_file) -> None:
    content = _two_hunk_repo(repo)
    app = steady_app(
        repo, replay_file, xml_call("Read", file_path="shapes.py"), xml_call("Write", file_path="shapes.py", content=content)
    )

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await ready(pilot)
        await send(pilot, "use math.pi and an f-string")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="review")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(170, 36), run_before=run_before)
