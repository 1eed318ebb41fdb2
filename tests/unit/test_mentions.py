"""`@path` mentions: parsing, the in-memory file index, and attachments as Read shows them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent.core.output_budget import OutputBudget
from agent.core.tools.base import ShellState, ToolContext
from agent.core.tools.readstate import ReadState
from agent.git import find_repository
from agent.session.mentions import FileIndex, MentionRefused, attach, mention_at_cursor, mentions


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def context(root: Path) -> ToolContext:
    return ToolContext(root=root.resolve(), read_state=ReadState(), changes=None, runner=None,  # type: ignore[arg-type]
                       approvals=None, shell=ShellState(cwd=root.resolve()))  # type: ignore[arg-type]


def test_mentions_are_words_starting_with_at() -> None:
    assert mentions("look at @calc.py and @src/a b, not me@example.com") == ["calc.py", "src/a"]
    assert mentions('@"with space.txt" and @calc.py @calc.py') == ["with space.txt", "calc.py"]
    assert mention_at_cursor("fix @sr", 7) == (4, "sr")
    assert mention_at_cursor("fix @src/x now", 9) == (4, "src/")
    assert mention_at_cursor("me@x", 4) is None


def test_index_lists_tracked_and_untracked_not_ignored(repo: Path) -> None:
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("ignored\n")
    (repo / "notes.log").write_text("ignored\n")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "new_module.py").write_text("x = 1\n")
    index = FileIndex(repo, find_repository(repo))
    index.refresh()
    assert "calc.py" in index.paths and "pkg/new_module.py" in index.paths and "pkg/" in index.paths
    assert not any(p.startswith("build") or p.endswith(".log") for p in index.paths)
    assert index.match("calc")[0] == "calc.py"
    assert index.match("nmod") == ["pkg/new_module.py"]  # fuzzy: the characters in order
    assert index.match("pkg/n") == ["pkg/new_module.py"]
    assert index.match("zzz") == []
    # A query that extends the last one searches only its matches, and still finds the same.
    assert index.match("t") and index.match("te")[0] == "test_calc.py"


def test_index_ranks_file_names_before_deep_fuzzy_matches(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    git(root, "init", "-q")
    for rel in ("a/b/c/readme_old.txt", "README.md", "docs/reader.md", "r/e/a/d/m/e.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    index = FileIndex(root, find_repository(root))
    index.refresh()
    assert index.match("readme", limit=3) == ["README.md", "a/b/c/readme_old.txt", "r/e/a/d/m/e.txt"]


def test_attach_reads_as_read_does_and_refuses_what_read_refuses(repo: Path, tmp_path: Path) -> None:
    ctx = context(repo)
    budget = OutputBudget(tokens=None)
    found = attach("fix @calc.py, please", ctx, budget)
    assert [a.path for a in found] == ["calc.py"]
    assert "     1\tdef add(a, b):\n     2\t    return a - b" in found[0].text
    assert repo.resolve() / "calc.py" in ctx.read_state._stamps  # an Edit after it needs no Read first
    missing: list[str] = []
    assert attach("the @property decorator, @calc.pyy", ctx, budget, missing=missing) == []  # plain text
    assert missing == ["calc.pyy"]  # looks like a path: the user hears of it
    (tmp_path / "outside.txt").write_text("secret\n")
    with pytest.raises(MentionRefused, match="outside the repository"):
        attach("read @../outside.txt", ctx, budget)
    with pytest.raises(MentionRefused, match=r"\.git"):
        attach("see @.git/config", ctx, budget)
    os.symlink(tmp_path / "outside.txt", repo / "link.txt")
    with pytest.raises(MentionRefused, match="outside the repository"):
        attach("see @link.txt", ctx, budget)
    os.mkfifo(repo / "pipe")
    with pytest.raises(MentionRefused, match="FIFO"):
        attach("see @pipe", ctx, budget)


def test_attach_pages_by_the_budget_and_lists_folders(repo: Path) -> None:
    (repo / "big.txt").write_text("".join(f"line {i} of a long file\n" for i in range(1, 2001)))
    (repo / "pkg").mkdir()
    (repo / "pkg" / "a.py").write_text("a = 1\n")
    (repo / "pkg" / "b.py").write_text("b = 2\n")
    index = FileIndex(repo, find_repository(repo))
    index.refresh()
    found = attach("@big.txt and @pkg/", context(repo), OutputBudget(tokens=300), index)
    big, listing = found
    assert "line 1 of a long file" in big.text and "line 2000 of" not in big.text
    assert "Read again with offset=" in big.text
    assert listing.path == "pkg/" and listing.text.endswith("a.py\nb.py") and listing.what == "pkg/ (2 files)"
    assert big.what.startswith("big.txt (") and big.what != "big.txt (2000 lines)"

