"""Issue 33, hole 10: a diff or command to approve cannot hide characters that draw nothing or draw like
another one. `'admin'` and `'admin\\u200b'` looked the same in the approval diff; so did a Cyrillic `а`.

Real sessions (replayed model, real git, real bubblewrap): `ribbit run` in ask mode shows each diff and
command on stderr, where the bytes are checked; the patch reaches a terminal escaped and a pipe exact;
the TUI's review, Bash approval and /diff screens are checked on what they draw (a screenshot's text).
What is written, when approved, is the model's exact text.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from app.app import make_app
from app.screens.bash import BashApprovalScreen
from app.screens.review import EditReviewScreen
from app.screens.session_diff import SessionDiffScreen
from tests.conftest import git, xml_call
from tests.safety.cli import ribbit_cli, ribbit_cli_on_tty, write_replay
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

# Each drew as nothing (or a blank) in a diff: zero-width space, word joiner, BOM, soft hyphen, a tag
# character, the Hangul filler, a no-break space, a variation selector; then a Cyrillic а in a Latin word.
HIDDEN = {
    "\u200b": "\\u200b", "\u2060": "\\u2060", "\ufeff": "\\ufeff", "\u00ad": "\\xad", "\U000e0041": "\\U000e0041",
    "\u3164": "\\u3164", "\u00a0": "\\xa0", "\ufe0f": "\\ufe0f",
}
LOOK_ALIKE = ("\u0430dmin", "\\u0430dmin")
# Any of these raw in what the user saw is the hole.
RAW_INVISIBLE = re.compile("[\u200b\u2060\ufeff\u00ad\U000e0000-\U000e007f\u3164\u00a0\ufe0f\u0430]")


def admin_lines() -> tuple[str, str]:
    """A file's text with every hidden character (one per line), and the lines as they must be shown."""
    raw = "".join(f"user{n} = 'admin{char}'\n" for n, char in enumerate(HIDDEN)) + f"boss = '{LOOK_ALIKE[0]}'\n"
    shown = "".join(f"user{n} = 'admin{mark}'\n" for n, mark in enumerate(HIDDEN.values())) + f"boss = '{LOOK_ALIKE[1]}'\n"
    return raw, shown


@pytest.fixture
def users(repo: Path) -> Path:
    (repo / "users.py").write_text("user = 'admin'\n")
    git(repo, "add", "users.py")
    git(repo, "commit", "-qm", "users")
    return repo / "users.py"


def test_ask_mode_shows_hidden_characters_escaped_in_every_diff_and_command(repo: Path, users: Path, tmp_path: Path) -> None:
    raw, shown = admin_lines()
    turns = [
        xml_call("Read", file_path="users.py"),
        xml_call("Edit", file_path="users.py", old_string="user = 'admin'", new_string="user = 'admin\u200b'"),
        xml_call("Write", file_path="more.py", content=raw),
        xml_call("Bash", command="rm\u2060 -rf build\u3164 # \u0430dmin"),
        "done",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "ask", stdin=b"n\ny\nn\n")
    run.assert_clean_exit(0)
    err = run.err
    assert not RAW_INVISIBLE.search(err), sorted({hex(ord(c)) for c in RAW_INVISIBLE.findall(err)})
    assert "-user = 'admin'\n+user = 'admin\\u200b'" in err  # the Edit's diff
    assert "".join(f"+{line}\n" for line in shown.splitlines()) in err  # the Write's diff
    assert "(sandboxed: the repository writable (not .git), no network): rm\\u2060 -rf build\\u3164 # \\u0430dmin" in err
    # What was approved is written exactly; what was rejected is not.
    assert users.read_text() == "user = 'admin'\n"
    assert (repo / "more.py").read_text() == raw
    assert [e["decision"] for e in run.events if e["type"] == "approval"] == ["rejected", "approved", "rejected"]


def test_the_patch_is_escaped_on_a_terminal_and_exact_in_a_pipe(repo: Path, users: Path, tmp_path: Path) -> None:
    raw, shown = admin_lines()
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Write", file_path="more.py", content=raw), "done")
    piped = ribbit_cli(tmp_path, repo, replay, "--mode", "full-auto")
    piped.assert_clean_exit(0)
    assert "".join(f"+{line}\n" for line in raw.splitlines()).encode() in piped.stdout
    (repo / "more.py").unlink()
    screen = ribbit_cli_on_tty(tmp_path, repo, replay, "--mode", "full-auto")
    screen.assert_clean_exit(0)
    text = screen.stdout.decode()
    assert not RAW_INVISIBLE.search(text)
    assert "".join(f"+{line}\n" for line in shown.splitlines()) in text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def screen_text(app) -> str:  # type: ignore[no-untyped-def]
    """The screen as the terminal would get it: a screenshot's text runs, concatenated in order
    (the export draws blanks as U+00A0, so the raw no-break space is looked for in the export itself)."""
    svg = app.export_screenshot()
    runs = [html.unescape(run) for run in re.findall(r">([^<]*)</text>", svg)]
    assert not RAW_INVISIBLE.search("".join(runs).replace("\u00a0", " ")), svg
    return "".join(runs).replace("\u00a0", " ")


@pytest.mark.anyio
async def test_tui_review_bash_approval_and_session_diff_show_them_escaped(repo: Path, users: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    replay = replay_file(
        xml_call("Read", file_path="users.py"),
        xml_call("Edit", file_path="users.py", old_string="user = 'admin'", new_string="user = 'admin\u200b\ufeff'"),
        xml_call("Bash", command="rm\u2060 -rf build\u3164", description="tidy \u0430dmin"),
        xml_call("Write", file_path="boss.py", content=f"boss = '{LOOK_ALIKE[0]}'\nkey = 'a\U000e0041b'\n"),
        "Done.",
    )
    app = make_app(repo, f"replay:{replay}", mode="ask")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "go")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="edit review")
        await pilot.pause(0.1)
        assert "+ user = 'admin\\u200b\\ufeff'" in screen_text(app)
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, BashApprovalScreen), what="bash approval")
        await pilot.pause(0.1)
        shot = screen_text(app)
        assert "$ rm\\u2060 -rf build\\u3164" in shot and "tidy \\u0430dmin" in shot
        await pilot.press("n")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="write review")
        await pilot.pause(0.1)
        shot = screen_text(app)
        assert f"boss = '{LOOK_ALIKE[1]}'" in shot and "key = 'a\\U000e0041b'" in shot
        await pilot.press("y")
        await idle(pilot)
        await send(pilot, "/diff")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionDiffScreen), what="/diff")
        await pilot.pause(0.1)
        shot = screen_text(app)
        assert "+user = 'admin\\u200b\\ufeff'" in shot and f"+boss = '{LOOK_ALIKE[1]}'" in shot
    assert users.read_text() == "user = 'admin\u200b\ufeff'\n"  # approved: the exact text
    assert (repo / "boss.py").read_text() == f"boss = '{LOOK_ALIKE[0]}'\nkey = 'a\U000e0041b'\n"
