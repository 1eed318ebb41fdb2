"""The .gitignore matcher (agent.glob_pattern.IgnoreRules) against git itself (`git check-ignore`),
pattern by pattern on a real tree, and on patterns made up by hypothesis."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.glob_pattern import IgnoreRules

# Folders end in "/" here (made as folders on disk); everything else is a file.
TREE = [
    "a", "b", "ab", "ba", "aa", "a.log", "x.log", "keep.log", "top", ".hidden", "a b", "a\\b", "[ab]", "*", "?",
    "é", "\u200b", "-", "build/", "build/out.o", "build/sub/", "build/sub/deep.o", "src/", "src/a", "src/top",
    "src/build/", "src/build/x", "src/a.log", "src/b/", "src/b/a", "src/b/c/", "src/b/c/a", "doc/", "doc/x/",
    "doc/x/y/", "doc/x/y/z", "doc/z", "foo/", "foo/bar", "foo/a/", "foo/a/bar", "foo/a/b/", "foo/a/b/bar",
    "foobar", "lib/", "lib/x.py", "lib/keep/", "lib/keep/k.py",
]

PATTERNS = [
    "a", "/a", "a/", "*", "*a", "a*", "*a*", "?", "??", "[ab]", "[!a]", "[^a]", "[a-b]", "[b-a]", "[]]", "[!]]",
    "[a-]", "[-a]", "\\[ab]", "\\*", "\\?", "a\\ b", "a b", "a\\\\b", "*.log", "!keep.log", "/top", "top",
    "build/", "build", "build/*", "build/**", "**/build", "**/build/", "src/**/a", "src/**", "src/*/a",
    "foo/**/bar", "foo/**bar", "foo**/bar", "**/bar", "***/bar", "doc/**/z", "/**", "**", "doc/x/**", "lib/*",
    "[[:alpha:]]", "[[:digit:]]", "[[:punct:]]", "[[:nope:]]", "[[:alpha:]", "[", "a\\", "*.log   ",
    "*.log\\ ", "#a", "\\#a", "\\!a", "src/b", "/src/b/", "*/a", "*/*/a", "a/b/c", ".*", "é", "?\u200b",
    "[a-z]*[a-z]", "*a*a*a*a*a*a*a*a*c",
]

# Files with several patterns: the last one that matches decides; a deeper file wins over a higher one.
PATTERN_FILES = [
    ["*.log", "!keep.log"],
    ["!keep.log", "*.log"],
    ["build/", "!build/"],
    ["src/**", "!src/b/"],
    ["lib/*", "!lib/keep/"],
    ["*", "!*/", "!*.log"],
    ["a", "!a", "a"],
]


def make_tree(root: Path) -> list[str]:
    for entry in TREE:
        path = root / entry
        if entry.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
    return [entry.rstrip("/") for entry in TREE]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("ignore") / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root, make_tree(root)


def git_ignored(root: Path, lines: list[str], paths: list[str]) -> set[str]:
    (root / ".gitignore").write_bytes(("\n".join(lines) + "\n").encode())
    proc = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "--no-index", "-v", "-n", "-z", "--stdin"],
        input=b"".join(os.fsencode(p) + b"\0" for p in paths), capture_output=True, check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    fields = proc.stdout.split(b"\0")
    out = set()
    for i in range(0, len(fields) - 3, 4):
        source, pattern, path = fields[i], fields[i + 2], fields[i + 3]
        if source and not pattern.startswith(b"!"):
            out.add(os.fsdecode(path))
    return out


def ours_ignored(root: Path, lines: list[str], paths: list[str]) -> set[str]:
    """As a walk applies the rules: a path under an ignored folder is ignored (git never looks inside)."""
    rules = IgnoreRules(("\n".join(lines) + "\n").encode())
    out = set()
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if rules.decide(prefix, (root / prefix).is_dir()):
                out.add(path)
                break
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
def test_each_pattern_ignores_what_git_ignores(tree: tuple[Path, list[str]], pattern: str) -> None:
    root, paths = tree
    assert ours_ignored(root, [pattern], paths) == git_ignored(root, [pattern], paths)


@pytest.mark.parametrize("lines", PATTERN_FILES)
def test_the_last_matching_pattern_decides_as_in_git(tree: tuple[Path, list[str]], lines: list[str]) -> None:
    root, paths = tree
    assert ours_ignored(root, lines, paths) == git_ignored(root, lines, paths)


def test_crlf_bom_and_comments_are_read_as_git_reads_them(tree: tuple[Path, list[str]]) -> None:
    root, paths = tree
    data = b"\xef\xbb\xbfa\r\n# b\r\n\r\n*.log\r\n"
    (root / ".gitignore").write_bytes(data)
    rules = IgnoreRules(data)
    assert {p for p in paths if "/" not in p and rules.decide(p, (root / p).is_dir())} == {"a", "a.log", "x.log", "keep.log"}
    assert {p for p in git_ignored(root, ["a", "*.log"], paths) if "/" not in p} == {"a", "a.log", "x.log", "keep.log"}


PIECES = st.sampled_from([
    "a", "b", "*", "**", "?", "/", "[ab]", "[!a]", "\\*", "[a-", "-", "!", " ", "\\", "]", "[", "[:alpha:]", "[:", ":]",
    "**/", "/**", "\\/",
])
NAMES = st.lists(st.sampled_from(["a", "b", "ab", "ba", "aab"]), min_size=1, max_size=4)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=st.lists(PIECES, min_size=1, max_size=7).map("".join), paths=st.lists(NAMES, min_size=1, max_size=6))
def test_made_up_patterns_match_as_in_git(tmp_path_factory: pytest.TempPathFactory, pattern: str, paths: list[list[str]]) -> None:
    root = tmp_path_factory.mktemp("made-up")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    listed: set[str] = set()
    for parts in paths:
        *folders, name = parts
        for depth in range(1, len(folders) + 1):
            folder = "/".join(folders[:depth])
            if (root / folder).is_file():
                break
            (root / folder).mkdir(exist_ok=True)
            listed.add(folder)
        else:
            target = root.joinpath(*parts)
            if not target.exists():
                target.write_bytes(b"")
            listed.add("/".join(parts))
    ordered = sorted(listed)
    assert ours_ignored(root, [pattern], ordered) == git_ignored(root, [pattern], ordered), pattern
