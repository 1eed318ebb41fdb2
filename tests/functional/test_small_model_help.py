"""Help for a small model, through whole `ribbit run` sessions (replay model, real git repos): Edits that
miss only by whitespace, a syntax check after Python writes, and calls that go round in circles.
Each test checks the file on disk and the result text the model got back."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import git, tree_bytes, xml_call
from tests.functional.helpers import ribbit_run

TABBED = "class Stack:\n\tdef __init__(self):\n\t\tself.items = []\n\n\tdef push(self, item):\n\t\tself.items.append(item)\n"


def commit(repo: Path, name: str, text: str) -> None:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"add {name}")


def run(capsys, tmp_path, repo, replay_file, *turns: str):  # type: ignore[no-untyped-def]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns, "Done."), "--mode", "auto-edit")
    assert result.code == 0, result.stderr
    return result


# -- whitespace-tolerant Edit ---------------------------------------------------------------------


def test_spaces_for_tabs_are_applied_with_the_files_tabs_and_said(capsys, tmp_path, repo, replay_file) -> None:
    commit(repo, "stack.py", TABBED)
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Read", file_path="stack.py"),
                 xml_call("Edit", file_path="stack.py",
                          old_string="    def push(self, item):\n        self.items.append(item)",
                          new_string="    def push(self, item):\n        if item is not None:\n            self.items.append(item)"))
    assert (repo / "stack.py").read_text() == TABBED.replace(
        "\t\tself.items.append(item)\n", "\t\tif item is not None:\n\t\t\tself.items.append(item)\n")
    told = result.tool_results()[1]
    assert "did not match stack.py exactly; it matched lines 5-6" in told
    assert "tabs where old_string had spaces; 4 spaces taken as one tab" in told
    assert "Edited stack.py" in told and "\t\t\tself.items.append(item)" in told


def test_a_block_indented_one_level_off_is_moved_back(capsys, tmp_path, repo, replay_file) -> None:
    commit(repo, "shop.py", "def total(items):\n    if items:\n        s = sum(items)\n        return s\n    return 0\n")
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Read", file_path="shop.py"),
                 xml_call("Edit", file_path="shop.py", old_string="if items:\n    s = sum(items)\n    return s",
                          new_string="if items:\n    s = sum(items)\n    return round(s, 2)"))
    assert (repo / "shop.py").read_text() == (
        "def total(items):\n    if items:\n        s = sum(items)\n        return round(s, 2)\n    return 0\n")
    assert "the file's indentation is 4 spaces where old_string had none" in result.tool_results()[1]


def test_trailing_spaces_in_the_file_do_not_stop_an_edit(capsys, tmp_path, repo, replay_file) -> None:
    commit(repo, "cfg.py", "DEBUG = True   \nPORT = 80\t\n")
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Read", file_path="cfg.py"),
                 xml_call("Edit", file_path="cfg.py", old_string="DEBUG = True\nPORT = 80", new_string="DEBUG = False\nPORT = 80"))
    assert (repo / "cfg.py").read_text() == "DEBUG = False\nPORT = 80\n"
    assert "trailing whitespace ignored" in result.tool_results()[1]


def test_an_ambiguous_whitespace_match_is_refused_naming_the_candidates(capsys, tmp_path, repo, replay_file) -> None:
    commit(repo, "two.py", "def a():\n    x = 1\n    return x\n\n\ndef b():\n  x = 1\n  return x\n")
    before = tree_bytes(repo)
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Read", file_path="two.py"),
                 xml_call("Edit", file_path="two.py", old_string="x = 1\n\treturn x", new_string="x = 2\n\treturn x"))
    assert tree_bytes(repo) == before
    told = result.tool_results()[1]
    assert told.startswith("Error: old_string was not found in two.py as written")
    assert "it matches 2 places (starting at lines 2, 7)" in told


def test_different_words_are_still_not_found(capsys, tmp_path, repo, replay_file) -> None:
    before = tree_bytes(repo)
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Read", file_path="calc.py"),
                 xml_call("Edit", file_path="calc.py", old_string="    return a  -  b", new_string="    return a + b"))
    assert tree_bytes(repo) == before  # whitespace inside a line must still match
    assert result.tool_results()[1].startswith("Error: old_string was not found in calc.py.")


# -- syntax check after Write / Edit ------------------------------------------------------------


def test_an_edit_that_breaks_python_is_applied_and_the_error_reported(capsys, tmp_path, repo, replay_file) -> None:
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Read", file_path="calc.py"),
                 xml_call("Edit", file_path="calc.py", old_string="    return a - b", new_string="    return (a + b"))
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return (a + b\n"
    told = result.tool_results()[1]
    assert "Warning: calc.py does not compile (Python 3." in told
    assert "line 2: '(' was never closed" in told


def test_writes_are_checked_only_for_python_and_only_compiled(capsys, tmp_path, repo, replay_file) -> None:
    marker = tmp_path / "ran"
    evil = f"import os\nos.system('touch {marker}')\ndef broken(:\n"
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Write", file_path="good.py", content="def f():\n    return 1\n"),
                 xml_call("Write", file_path="bad.py", content=evil),
                 xml_call("Write", file_path="notes.txt", content="def broken(:\n"),
                 xml_call("Write", file_path="deep.py", content="x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"))
    results = result.tool_results()
    assert results[0] == "Created good.py (2 lines)."
    assert "Warning: bad.py does not compile" in results[1] and "line 3: invalid syntax" in results[1]
    assert results[2] == "Created notes.txt (1 line)."
    assert "Warning: deep.py does not compile" in results[3]  # too nested: a one-line note, no crash
    assert (repo / "bad.py").read_text() == evil and not marker.exists()  # compiled, never run


def test_a_rejected_write_is_not_checked(capsys, tmp_path, repo, replay_file) -> None:
    result = ribbit_run(capsys, tmp_path, repo, replay_file(xml_call("Write", file_path="x.py", content="(\n"), "ok"),
                        stdin="n\n")
    assert not (repo / "x.py").exists()
    assert "does not compile" not in result.tool_results()[0]


# -- calls that go round in circles ---------------------------------------------------------------


def test_alternating_calls_are_flagged_like_a_repeated_one(capsys, tmp_path, repo, replay_file) -> None:
    read, glob = xml_call("Read", file_path="calc.py"), xml_call("Glob", pattern="*.py")
    results = run(capsys, tmp_path, repo, replay_file, read, glob, read, glob, read).tool_results()
    assert not any("Warning" in r for r in results[:3])
    assert "Warning: your last 4 calls went round the same 2 calls 2 times (Read(calc.py), Glob(*.py))" in results[3]
    assert "Warning: your last 4 calls went round" in results[4]  # still going round: still said


def test_a_cycle_of_three_is_flagged_and_progress_is_not(capsys, tmp_path, repo, replay_file) -> None:
    a, b, c = (xml_call("Read", file_path="calc.py"), xml_call("Glob", pattern="*.py"),
               xml_call("Bash", command="git status --short"))
    results = run(capsys, tmp_path, repo, replay_file, a, b, c, a, b, c).tool_results()
    assert not any("Warning" in r for r in results[:5])
    assert "your last 6 calls went round the same 3 calls 2 times" in results[5]
    # Different arguments are progress, not a loop.
    other = [xml_call("Read", file_path="calc.py", offset=n) for n in (1, 2)]
    results = run(capsys, tmp_path / "2", repo, replay_file, other[0], b, other[1], b).tool_results()
    assert not any("Warning" in r for r in results)


def test_patch_of_a_loose_edit_applies_with_git(capsys, tmp_path, repo, replay_file) -> None:
    commit(repo, "stack.py", TABBED)
    result = run(capsys, tmp_path, repo, replay_file,
                 xml_call("Read", file_path="stack.py"),
                 xml_call("Edit", file_path="stack.py", old_string="  def push(self, item):",
                          new_string="  def push(self, item: object):"))
    assert "\tdef push(self, item: object):\n" in (repo / "stack.py").read_text()
    subprocess.run(["git", "-C", str(repo), "apply", "-R", "--check"], input=result.patch, text=True, check=True)
