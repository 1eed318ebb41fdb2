"""Read's window, read in chunks, against reading the whole file and splitting it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agent.core.tools.files as files
from agent.core.tools.files import read_window


def reference(data: bytes, first: int, limit: int) -> tuple[list[str], int]:
    text = data.decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines[first - 1 : first - 1 + limit], len(lines)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "bc", "\n", "\r\n", "é", "\x0c", "\u2028", "日本"]), max_size=60).map("".join),
    st.integers(1, 12), st.integers(1, 12), st.integers(1, 7),
)
def test_window_matches_reading_everything(tmp_path_factory: pytest.TempPathFactory, text: str, first: int, limit: int, chunk: int) -> None:
    path = tmp_path_factory.mktemp("w") / "f.txt"
    data = text.encode("utf-8")
    path.write_bytes(data)
    saved = files.CHUNK_BYTES
    files.CHUNK_BYTES = chunk  # windows and lines cut at every possible chunk boundary
    try:
        window = read_window(path, "f.txt", first, limit)
    finally:
        files.CHUNK_BYTES = saved
    lines, total = reference(data, first, limit)
    assert not window.binary and window.total == total and window.lines == lines
    assert window.stamp.sha256 == hashlib.sha256(data).hexdigest() and window.stamp.size == len(data)


@pytest.mark.parametrize(
    "data", [b"ok\n\x00", b"ok\n\xff\n", b"ok\n\xe6\x97"],  # NUL, not UTF-8, cut inside a character
)
def test_binary_anywhere_in_the_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x\n" * 10_000 + data)
    assert read_window(path, "f", 1, 5).binary is (data != b"ok\n\x00")  # NUL counts in the first 8 KiB only


def test_a_long_line_is_kept_only_as_far_as_shown(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"\xc3\xa9" * 3_000_000 + b"\nend\n")  # 6 MB on one line, two bytes a character
    window = read_window(path, "f", 1, 10)
    assert window.total == 2 and window.lines[1] == "end"
    assert 2000 < len(window.lines[0]) <= 4 * 2000 + 4 and set(window.lines[0]) == {"é"}
