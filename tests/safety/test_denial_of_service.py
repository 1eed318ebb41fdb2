"""Hole 9: every tool has a bounded cost on hostile input.

The attacks run through `ribbit run` (real git, real bubblewrap, replayed model). A hang or a blow-up
shows as the subprocess timing out or dying under its memory cap; what is checked is the outcome:
the exit code, the results the model got, the files on disk. Times and memory are in
`python -m bench.hostile`, not here.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, xml_call
from tests.safety.cli import ribbit_cli, write_replay

MiB = 1024 * 1024


def repeated_lines(count: int) -> list[str]:
    shapes = ["    pass\n", "\n", "    return None\n", "}\n", "    x += 1\n"]
    return [shapes[i % len(shapes)] for i in range(count)]


def test_glob_patterns_that_used_to_explode(repo: Path, tmp_path: Path) -> None:
    (repo / ("a" * 200)).write_text("x\n")
    deep = repo.joinpath(*["x"] * 60)
    deep.mkdir(parents=True)
    (deep / "y").write_text("x\n")
    turns = [
        xml_call("Glob", pattern="{a,b}" * 26 + ".py"),  # 67 million patterns once expanded
        xml_call("Glob", pattern="*a" * 12 + "*b"),  # exponential backtracking on a 200-letter name
        xml_call("Glob", pattern="*a" * 12 + "*"),
        xml_call("Glob", pattern="**/x/" * 12 + "**/z"),  # the same, folder by folder
        xml_call("Glob", pattern="**/x/" * 12 + "**/y"),
        xml_call("Glob", pattern="{" * 12 + "a" + "}" * 12),
        "done",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    run.assert_clean_exit(0)
    braces, no_b, all_a, no_z, deep_y, nested = run.tool_results()
    assert braces.startswith("Error: bad pattern: the braces expand to more than 64 patterns")
    assert no_b == "No files found" and all_a == "a" * 200
    assert no_z == "No files found" and deep_y == "/".join(["x"] * 60) + "/y"
    assert nested.startswith("Error: bad pattern: braces nest more than")


def test_special_files_are_refused_by_every_tool(repo: Path, tmp_path: Path) -> None:
    make = (
        "mkfifo pipe && ln -s pipe link-to-pipe && ln -s /dev/zero zero && "
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\" && echo made"
    )
    turns = [
        xml_call("Bash", command=make),
        xml_call("Read", file_path="pipe"),
        xml_call("Read", file_path="link-to-pipe"),
        xml_call("Read", file_path="sock"),
        xml_call("Read", file_path="zero"),
        xml_call("Edit", file_path="pipe", old_string="a", new_string="b"),
        xml_call("Write", file_path="pipe", content="x\n"),
        xml_call("Bash", command="echo 'a - b' > scratch.txt"),
        xml_call("Read", file_path="scratch.txt"),
        xml_call("Bash", command="rm scratch.txt && mkfifo scratch.txt"),  # a file read earlier becomes a FIFO
        xml_call("Edit", file_path="scratch.txt", old_string="a - b", new_string="a + b"),
        xml_call("Glob", pattern="*", path="pipe"),
        "done",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    run.assert_clean_exit(0)
    results = run.tool_results()
    assert results[0] == "made"
    assert results[1].startswith("Error: pipe is a FIFO") and results[2].startswith("Error: pipe is a FIFO")
    assert results[3].startswith("Error: cannot read sock") or results[3].startswith("Error: sock is a socket")
    assert results[4].startswith("Error: zero is outside the repository")
    assert all(r.startswith("Error:") for r in results[5:7]), results[5:7]
    assert results[8] == "     1\ta - b"
    assert results[10].startswith("Error:") and "scratch.txt" in results[10]
    assert results[11].startswith("Error: pipe is not a folder")
    assert (repo / "pipe").is_fifo() and (repo / "scratch.txt").is_fifo()


def test_read_of_a_huge_file_reads_only_the_window(repo: Path, tmp_path: Path) -> None:
    """600 MB of text under a 1 GiB address-space cap (ribbit itself maps about 0.5 GiB): reading the
    file whole, as before, dies with MemoryError; a window of it does not."""
    big = repo / "big.log"  # ignored by the repository's .gitignore: the journal leaves it alone
    block = b"".join(b"line %07d of a large log file, padded out a little further\n" % i for i in range(10_000))
    one_line = repo / "oneline.log"
    try:
        with big.open("wb") as handle:
            for _ in range(600 * MiB // len(block)):
                handle.write(block)
        lines = big.stat().st_size // len(block) * 10_000
        one_line.write_bytes(b"x" * (50 * MiB) + b"\nsecond\n")
        turns = [
            xml_call("Read", file_path="big.log", offset=1000, limit=3),
            xml_call("Read", file_path="big.log", limit=10**9),
            xml_call("Read", file_path="oneline.log"),
            "done",
        ]
        run = ribbit_cli(
            tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto", "--no-sandbox",
            memory_cap=1024 * MiB,
        )
        run.assert_clean_exit(0)
        window, everything, long_line = run.tool_results()
        assert window.splitlines()[:3] == [
            f"{n:>6}\tline {(n - 1) % 10_000:07d} of a large log file, padded out a little further" for n in (1000, 1001, 1002)
        ]
        assert window.endswith(f"(Showing lines 1000-1002 of {lines}. Use offset and limit to see more.)")
        shown = everything.rsplit("(Showing lines 1-", 1)[1]
        # limit=10**9 stops at the 256 KiB window; the result then at the token budget (agent.core.output_budget).
        assert int(shown.split(" ")[0]) < lines and shown.startswith(f"{shown.split(' ')[0]} of {lines}; the rest did not fit")
        first, second = long_line.splitlines()[:2]
        assert first == "     1\t" + "x" * 2000 + " [... line cut at 2000 characters]" and second == "     2\tsecond"
    finally:
        big.unlink(missing_ok=True)
        one_line.unlink(missing_ok=True)


def test_edit_and_write_on_40000_repeated_lines(repo: Path, tmp_path: Path) -> None:
    lines = repeated_lines(40_000)
    lines[20_000] = "    marker = 'here'\n"
    (repo / "big.py").write_text("".join(lines))
    git(repo, "add", "big.py")
    git(repo, "commit", "-qm", "big")
    rewritten = list(lines)
    rewritten[20_000] = "    marker = 'there'\n"
    for i in range(0, 40_000, 400):
        rewritten[i + 1] = f"    changed_{i} = True\n"
    turns = [
        xml_call("Read", file_path="big.py", limit=5),
        xml_call("Edit", file_path="big.py", old_string="    marker = 'here'\n", new_string="    marker = 'moved'\n    pass\n"),
        xml_call("Read", file_path="big.py", limit=5),
        xml_call("Write", file_path="big.py", content="".join(rewritten)),
        "done",
    ]
    run = ribbit_cli(
        tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "ask", "--max-turn-tokens", "1000000",
        "--context", "10000000", stdin=b"y\ny\n",
    )
    run.assert_clean_exit(0)
    assert "@@ -19998,7 +19998,8 @@" in run.err  # the Edit's diff, as precise as ever
    assert "-    marker = 'here'\n+    marker = 'moved'\n+    pass" in run.err.replace("\r", "")
    assert (repo / "big.py").read_text() == "".join(rewritten)
    patch = run.stdout.decode()
    assert "+    marker = 'there'" in patch and "+    changed_38800 = True" in patch
    applied = subprocess.run(["git", "-C", str(repo), "apply", "-R", "--check", "-"], input=run.stdout, capture_output=True)
    assert applied.returncode == 0, applied.stderr  # the patch is a real diff of the session


def test_edit_with_countless_matches_or_a_huge_result(repo: Path, tmp_path: Path) -> None:
    (repo / "a.txt").write_text(("a" * 99 + "\n") * 100_000)  # 10 MB, 9.9 million "a"
    (repo / "similar.txt").write_text(("abcd" * 50 + "\n") * 50_000)
    before = (repo / "a.txt").read_bytes()
    turns = [
        xml_call("Read", file_path="a.txt", limit=1),
        xml_call("Edit", file_path="a.txt", old_string="a", new_string="b"),
        xml_call("Edit", file_path="a.txt", old_string="a", new_string="b" * 1000, replace_all="true"),
        xml_call("Read", file_path="similar.txt", limit=1),
        xml_call("Edit", file_path="similar.txt", old_string="dcba" * 50, new_string="x"),
        "done",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    run.assert_clean_exit(0)
    _, many, huge, _, missing = run.tool_results()
    assert many.startswith("Error: old_string occurs 9900000 times in a.txt (lines 1, ...)")
    assert huge.startswith("Error: the edited a.txt would be over 16 MiB; nothing was changed")
    assert missing.startswith("Error: old_string was not found in similar.txt.")
    assert (repo / "a.txt").read_bytes() == before


def test_a_turn_of_unclosed_tags_is_parsed_in_linear_time(repo: Path, tmp_path: Path) -> None:
    """100,000 `<function=` without `>` took hours (each scanned the rest of the line)."""
    turns = ["<tool_call>\n" + "<function=" * 100_000, xml_call("Read", file_path="calc.py"), "done"]
    run = ribbit_cli(
        tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto",
        "--max-turn-tokens", "1000000", "--context", "10000000",
    )
    run.assert_clean_exit(0)
    assert run.user_notes()[0].startswith("Error: your tool call could not be read: a <tool_call> is not closed")
    assert run.tool_results() == ["     1\tdef add(a, b):\n     2\t    return a - b"]


@pytest.mark.parametrize("replacement", ["mkfifo notes.txt", "ln -s /dev/zero notes.txt"])
def test_a_file_ribbit_wrote_then_replaced_in_the_same_turn_never_hangs_or_fills_memory(
    repo: Path, tmp_path: Path, replacement: str,
) -> None:
    """The watcher recognises ribbit's own writes by hashing the file; it read the path whole, following
    links and blocking on FIFOs. Write notes.txt, then in the same turn replace it by a FIFO (ribbit hung
    at the end of the step, Ctrl+C ignored) or a link to /dev/zero (ribbit read until memory ran out)."""
    turn = xml_call("Write", file_path="notes.txt", content="hello\n") + "\n" + xml_call(
        "Bash", command=f"rm notes.txt && {replacement}",
    )
    run = ribbit_cli(
        tmp_path, repo, write_replay(tmp_path / "r.jsonl", turn, "done"), "--mode", "full-auto",
        memory_cap=1024 * MiB, timeout=120,
    )
    run.assert_clean_exit(0)
    assert run.summary()["stop_reason"] == "finished"
    assert "internal error" not in run.err
    assert (repo / "notes.txt").is_symlink() or stat.S_ISFIFO((repo / "notes.txt").lstat().st_mode)
