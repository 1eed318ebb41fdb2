"""The glob compiler against a slow, obviously-correct matcher, and its limits."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.glob_pattern import (
    MAX_ALTERNATIVES, GlobPatternError, compile_glob, expand_braces, glob_matches,
)


def reference_segments(pattern: str) -> list[str]:
    out: list[str] = []
    for segment in pattern.split("/"):
        if segment in ("", "."):
            continue
        if segment != "**" and segment.startswith("**"):
            out += ["**", "*" + segment.lstrip("*")]
        elif segment != "**" and segment.endswith("**"):
            out += [segment.rstrip("*") + "*", "**"]
        else:
            out.append(segment)
    return out


def reference_match(segments: list[str], parts: list[str]) -> bool:
    """Plain recursion: `**` takes any number of whole segments, the rest is fnmatch per segment."""
    if not segments:
        return not parts
    head, rest = segments[0], segments[1:]
    if head == "**":
        return any(reference_match(rest, parts[k:]) for k in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], head) and reference_match(rest, parts[1:])


def reference(pattern: str, path: str) -> bool:
    return any(reference_match(reference_segments(p), path.split("/")) for p in expand_braces(pattern))


patterns = st.text(alphabet="ab*?/[]!", max_size=12)
paths = st.lists(st.text(alphabet="ab!", min_size=1, max_size=5), min_size=1, max_size=4).map("/".join)


@settings(max_examples=1500, deadline=None)
@given(patterns, paths)
def test_compiled_glob_agrees_with_the_reference(pattern: str, path: str) -> None:
    try:
        regex = compile_glob(pattern)
    except GlobPatternError:
        return
    assert glob_matches(regex, path) == reference(pattern, path), (pattern, path)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("**/*.py", "a.py", True), ("**/*.py", "src/a/b.py", True), ("*.py", "src/a.py", False),
        ("src/**", "src/a/b.txt", True), ("src/**", "srcx/a", False), ("**.py", "a/b/c.py", True),
        ("src/*.{py,pyi}", "src/a.pyi", True), ("{src,test}/**/*.{py,json}", "test/x/y.json", True),
        ("{a,{b,c}}.txt", "c.txt", True), ("[!a]*.py", "b.py", True), ("[!a]*.py", "a.py", False),
        ("[a-c]?.md", "b1.md", True), ("./src/*.py", "src/x.py", True), ("{a}.txt", "a.txt", True),
        ("a{b.txt", "a{b.txt", True), ("x[.txt", "x[.txt", True), ("a/**/b/**/c", "a/b/c", True),
        ("a/**/b/**/c", "a/x/y/b/z/c", True), ("a/**/b/**/c", "a/x/c", False),
    ],
)
def test_glob_semantics(pattern: str, path: str, expected: bool) -> None:
    assert glob_matches(compile_glob(pattern), path) is expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("[z-a]*.py", "bad character range z-a"),
        ("{a,b}" * 26 + ".py", f"more than {MAX_ALTERNATIVES} patterns"),
        ("{" * 20 + "a" + "}" * 20, "nest more than"),
        ("a" * 5000, "at most"),
    ],
)
def test_bad_patterns_are_refused_with_a_reason(pattern: str, message: str) -> None:
    with pytest.raises(GlobPatternError, match=message):
        compile_glob(pattern)


def test_stars_never_backtrack_exponentially() -> None:
    """With a plain translation each of these retries every split of the name (days of work);
    compiled here they are answered at once (bench.hostile has the figures)."""
    cases = [
        ("*a" * 12 + "*b", "a" * 200),
        ("**/x/" * 10 + "**/y", "/".join(["x"] * 80) + "/z"),
        ("*" + "?*" * 30 + "b", "a" * 250),
    ]
    for pattern, path in cases:
        assert not glob_matches(compile_glob(pattern), path)
        assert glob_matches(compile_glob(pattern), path[:-1] + ("b" if path.endswith("a") else "y"))
