from __future__ import annotations

from pathlib import Path

from tests.unit.helpers import call, make_ctx


def test_lines_are_numbered_right_aligned_to_six(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    out = call(make_ctx(tmp_path), "Read", file_path="a.py")
    assert out == "     1\tx = 1\n     2\ty = 2"


def test_offset_and_limit_select_a_window_and_say_what_was_shown(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = call(make_ctx(tmp_path), "Read", file_path="a.txt", offset=3, limit=2)
    lines = out.splitlines()
    assert lines[0] == "     3\tline 3" and lines[1] == "     4\tline 4"
    assert "lines 3-4 of 10" in lines[-1]


def test_default_limit_is_2000_lines(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("".join(f"{i}\n" for i in range(2500)))
    out = call(make_ctx(tmp_path), "Read", file_path="big.txt")
    assert "  2000\t1999" in out and "  2001\t" not in out
    assert "lines 1-2000 of 2500" in out.splitlines()[-1]


def test_long_lines_are_cut_and_marked(tmp_path: Path) -> None:
    (tmp_path / "wide.txt").write_text("a" * 5000 + "\n")
    out = call(make_ctx(tmp_path), "Read", file_path="wide.txt")
    assert "a" * 2000 in out and "a" * 2001 not in out
    assert "cut at 2000 characters" in out


def test_missing_file_suggests_close_names(tmp_path: Path) -> None:
    (tmp_path / "config.py").write_text("")
    out = call(make_ctx(tmp_path), "Read", file_path="confg.py")
    assert out.startswith("Error:") and "does not exist" in out and "config.py" in out


def test_directory_binary_empty_and_offset_past_end(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "three.txt").write_text("1\n2\n3\n")
    assert "is a directory" in call(ctx, "Read", file_path="sub")
    assert "binary" in call(ctx, "Read", file_path="blob.bin")
    assert call(ctx, "Read", file_path="empty.txt") == "The file empty.txt is empty."
    past = call(ctx, "Read", file_path="three.txt", offset=9)
    assert past.startswith("Error:") and "has 3 lines" in past


def test_paths_outside_the_root_or_into_git_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (tmp_path / "secret.txt").write_text("s3cret")
    (root / "link").symlink_to(tmp_path / "secret.txt")
    ctx = make_ctx(root)
    for path in ("../secret.txt", str(tmp_path / "secret.txt"), "link", ".git/config", "/etc/passwd"):
        out = call(ctx, "Read", file_path=path)
        assert out.startswith("Error:"), path
        assert "s3cret" not in out
