"""Tool results sized by a token budget (agent.core.output_budget) and cut Bash output saved for Read
(agent.sandbox.output_spool): the budget holds, the note names the exact call, and that call gets the rest."""

from __future__ import annotations

from dataclasses import replace

import os
import re
from pathlib import Path

import pytest

from agent.core.output_budget import CEILING_TOKENS, FLOOR_TOKENS, SECONDS_PER_RESULT, OutputBudget, budget_for, estimate_tokens
from agent.sandbox.output_spool import SavedOutputs
from tests.unit.helpers import call, make_ctx

NOTE = re.compile(r'Read file_path="(?P<path>[^"]+)" offset=(?P<offset>\d+)')


def test_budget_follows_the_measured_prompt_speed_within_floor_ceiling_and_context() -> None:
    assert budget_for(50.0, 131_072).tokens == int(50 * SECONDS_PER_RESULT)
    assert budget_for(1.0, 131_072).tokens == FLOOR_TOKENS  # a very slow machine still sees something
    assert budget_for(10_000.0, 131_072).tokens == CEILING_TOKENS
    assert budget_for(10_000.0, 8192).tokens == 2048  # never more than a quarter of the context
    assert budget_for(None, 131_072).tokens == CEILING_TOKENS  # not measured yet
    assert budget_for(3.0, 131_072, override=777).tokens == 777
    assert "--tool-output-tokens" in budget_for(3.0, 131_072, override=777).reason


def numbered_file(root: Path, lines: int) -> Path:
    path = root / "big.py"
    path.write_text("".join(f"value_{n} = compute({n}, 'some text on line {n}')\n" for n in range(1, lines + 1)))
    return path


def test_read_of_5000_lines_stays_in_budget_and_paging_by_the_note_gets_every_line(tmp_path: Path) -> None:
    numbered_file(tmp_path, 5000)
    ctx = make_ctx(tmp_path)
    ctx = replace(ctx, budget=OutputBudget(tokens=1500))
    seen: list[int] = []
    offset = 1
    for _ in range(100):
        out = call(ctx, "Read", file_path="big.py", offset=offset)
        assert estimate_tokens(out) <= 1500
        body, _, note = out.partition("\n\n(Showing lines")
        for line in body.splitlines():
            number, text = line.split("\t")
            assert text == f"value_{int(number)} = compute({int(number)}, 'some text on line {int(number)}')"
            seen.append(int(number))
        found = re.search(r"Read again with offset=(\d+)", note)
        if not found:
            break
        assert "budget of 1500 tokens" in note
        offset = int(found.group(1))
    assert seen == list(range(1, 5001))


def test_read_without_a_budget_keeps_the_contract_window(tmp_path: Path) -> None:
    numbered_file(tmp_path, 5000)
    out = call(make_ctx(tmp_path), "Read", file_path="big.py")
    assert out.endswith("(Showing lines 1-2000 of 5000. Use offset and limit to see more.)")


def test_read_counts_with_the_given_tokenizer(tmp_path: Path) -> None:
    numbered_file(tmp_path, 300)
    ctx = make_ctx(tmp_path)
    calls: list[str] = []

    def one_token_per_char(text: str) -> int:
        calls.append(text)
        return len(text)

    ctx = replace(ctx, budget=OutputBudget(tokens=1000, count=one_token_per_char))
    out = call(ctx, "Read", file_path="big.py")
    shown = out.split("\n\n(Showing")[0]
    assert len(shown) <= 1000 and "offset=" in out
    assert sum(len(c) for c in calls) < 2000  # only about what is kept is counted, never the whole file


def saved_ctx(tmp_path: Path, tokens: int) -> tuple:
    root = tmp_path / "repo"
    root.mkdir()
    ctx = make_ctx(root)
    ctx = replace(ctx, outputs=SavedOutputs(tmp_path / "state" / "outputs"))
    ctx = replace(ctx, budget=OutputBudget(tokens=tokens))
    return root, ctx


def test_bash_printing_1_mb_stays_in_budget_and_read_pages_through_the_saved_output(tmp_path: Path) -> None:
    root, ctx = saved_ctx(tmp_path, 2000)
    command = "for i in $(seq 1 40000); do echo \"output line $i of a chatty build tool\"; done"
    out = call(ctx, "Bash", command=command)
    full = [f"output line {i} of a chatty build tool" for i in range(1, 40001)]
    assert len("\n".join(full)) > 1_000_000
    assert estimate_tokens(out) <= 2000
    note = NOTE.search(out)
    assert note, out[-600:]
    head = out.split("\n\n... [")[0].splitlines()
    tail = out.split("] ...\n\n")[1].splitlines()
    assert head == full[: len(head)] and tail == full[len(full) - len(tail):]
    first_cut = int(note.group("offset"))
    assert first_cut == len(head) + 1
    assert f"lines {first_cut}-{40000 - len(tail)} of 40000" in out
    saved = Path(note.group("path"))
    assert not saved.is_relative_to(root) and saved.read_text() == "\n".join(full) + "\n"
    assert os.stat(saved).st_mode & 0o777 == 0o600
    # The model follows the note: Read with that path and offset, page after page, gets the cut lines
    # (the first pages in turn, then the last page of the cut).
    last_cut = 40000 - len(tail)
    got: list[str] = []
    offset = first_cut
    for _ in range(3):
        page = call(ctx, "Read", file_path=str(saved), offset=offset)
        assert estimate_tokens(page) <= 2000 and not page.startswith("Error")
        got += [line.split("\t", 1)[1] for line in page.split("\n\n(Showing")[0].splitlines()]
        offset = int(re.search(r"Read again with offset=(\d+)", page).group(1))
    assert got == full[first_cut - 1 : offset - 1]
    page = call(ctx, "Read", file_path=str(saved), offset=last_cut - 5, limit=6)
    assert [line.split("\t", 1)[1] for line in page.split("\n\n(Showing")[0].splitlines()] == full[last_cut - 6 : last_cut]


def test_bash_output_that_fits_is_whole_and_nothing_is_kept(tmp_path: Path) -> None:
    _, ctx = saved_ctx(tmp_path, 2000)
    assert call(ctx, "Bash", command="seq 1 5") == "1\n2\n3\n4\n5"
    assert ctx.outputs.folder is None or not any(ctx.outputs.folder.iterdir())


def test_one_huge_line_shows_its_start_within_budget(tmp_path: Path) -> None:
    _, ctx = saved_ctx(tmp_path, 1000)
    out = call(ctx, "Bash", command="head -c 300000 /dev/zero | tr '\\0' x")
    assert estimate_tokens(out) <= 1000 and out.startswith("xxxx") and "[... line cut]" in out


def test_only_this_sessions_saved_files_are_readable_outside_the_root(tmp_path: Path) -> None:
    root, ctx = saved_ctx(tmp_path, 1500)
    out = call(ctx, "Bash", command="seq 1 100000")
    saved = Path(NOTE.search(out).group("path"))
    folder = saved.parent
    # Another file in the folder, a link named like a saved file, another session's folder: refused.
    (folder / "notes.txt").write_text("secret")
    os.symlink("/etc/passwd", folder / "bash-99.txt")
    other = tmp_path / "state" / "outputs" / "other-session"
    other.mkdir()
    (other / "bash-1.txt").write_text("another session")
    for path in (folder / "notes.txt", folder / "bash-99.txt", other / "bash-1.txt", folder / ".." / folder.name / saved.name):
        assert call(ctx, "Read", file_path=str(path)).startswith("Error:"), path
    # Only Read: Write and Edit treat the saved file as any path outside the repository.
    assert call(ctx, "Write", file_path=str(saved), content="x").startswith("Error:")
    assert call(ctx, "Edit", file_path=str(saved), old_string="1", new_string="2").startswith("Error:")
    assert saved.read_text().startswith("1\n2\n")


def test_saved_outputs_are_removed_with_the_session(tmp_path: Path) -> None:
    _, ctx = saved_ctx(tmp_path, 1000)
    saved = Path(NOTE.search(call(ctx, "Bash", command="seq 1 100000")).group("path"))
    assert saved.exists()
    ctx.outputs.close()
    assert not saved.parent.exists()


@pytest.mark.parametrize("tokens", [1000, 4000])
def test_budgeted_bash_keeps_the_contract_character_limit(tmp_path: Path, tokens: int) -> None:
    _, ctx = saved_ctx(tmp_path, tokens)
    out = call(ctx, "Bash", command="seq 1 200000")
    assert len(out) < 31_000 and out.startswith("1\n2\n") and out.endswith("200000")
    assert "lines cut" in out and estimate_tokens(out) <= tokens


def test_a_saved_output_dropped_under_the_session_cap_is_said_to_be_gone(tmp_path: Path) -> None:
    _, ctx = saved_ctx(tmp_path, 1000)
    saved = Path(NOTE.search(call(ctx, "Bash", command="seq 1 100000")).group("path"))
    saved.unlink()
    out = call(ctx, "Read", file_path=str(saved))
    assert out.startswith("Error:") and "does not exist" in out
