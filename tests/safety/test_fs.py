"""agent/fs.py, the one home of O_NOFOLLOW: atomic apply (mode and line endings kept, binary and .git/
refused, no torn file after kill -9), regular-file opens that follow no link and wait on no FIFO, confined
folder walks, and permission bits taken off only the inode that was looked at."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

import stat

from agent.fs import TEMP_SUFFIX, ApplyError, NotRegularFile, atomic_write, drop_bits, open_dir_confined, open_regular
from agent.undo.journal import Journal
from tests.conftest import git
from tests.unit.helpers import call, make_ctx


def test_write_keeps_mode_and_crlf(repo: Path) -> None:
    script = repo / "run.sh"
    script.write_bytes(b"echo one\r\necho two\r\n")
    script.chmod(0o755)
    ctx = make_ctx(repo)
    call(ctx, "Read", file_path="run.sh")
    result = call(ctx, "Write", file_path="run.sh", content="echo one\necho three\n")
    assert result.startswith("Replaced"), result
    assert script.read_bytes() == b"echo one\r\necho three\r\n"
    assert script.stat().st_mode & 0o777 == 0o755
    call(ctx, "Read", file_path="run.sh")
    assert call(ctx, "Edit", file_path="run.sh", old_string="three", new_string="four").startswith("Edited")
    assert script.read_bytes() == b"echo one\r\necho four\r\n"
    assert not [p for p in repo.iterdir() if p.name.endswith(TEMP_SUFFIX)]


def test_atomic_write_refuses_git_dir_and_binary_targets(repo: Path) -> None:
    config = repo / ".git" / "config"
    before = config.read_bytes()
    with pytest.raises(ApplyError, match=".git"):
        atomic_write(config, b"[core]\n")
    assert config.read_bytes() == before
    blob = repo / "image.bin"
    blob.write_bytes(b"\x89PNG\x00\x00data")
    with pytest.raises(ApplyError, match="binary"):
        atomic_write(blob, b"text")
    assert blob.read_bytes() == b"\x89PNG\x00\x00data"


def test_write_tool_refuses_binary_file(repo: Path) -> None:
    (repo / "image.bin").write_bytes(b"\x00\x01\x02")
    ctx = make_ctx(repo)
    assert call(ctx, "Read", file_path="image.bin").startswith("Error:")
    assert call(ctx, "Write", file_path="image.bin", content="x").startswith("Error:")
    assert (repo / "image.bin").read_bytes() == b"\x00\x01\x02"


def _writer(target: Path, old: bytes, new: bytes, ready: int) -> None:
    """Child process: flip the file between two contents as fast as possible until killed."""
    try:
        os.write(ready, b"r")
        i = 0
        while True:
            atomic_write(target, new if i % 2 == 0 else old)
            i += 1
    finally:
        os._exit(1)


def test_kill_9_during_apply_never_leaves_a_torn_file(repo: Path) -> None:
    target = repo / "big.txt"
    old = b"A" * (512 * 1024) + b"\n"
    target.write_bytes(old)
    new = b"B" * len(old) + b"new"
    seen = {"old": 0, "new": 0}
    rng = random.Random(4)
    for _ in range(40):
        read_end, write_end = os.pipe()
        pid = os.fork()  # a forked writer starts in microseconds, so many kills stay cheap
        if pid == 0:
            os.close(read_end)
            _writer(target, old, new, write_end)
        os.close(write_end)
        assert os.read(read_end, 1) == b"r"
        os.close(read_end)
        time.sleep(rng.uniform(0.0, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        data = target.read_bytes()
        assert data in (old, new), f"torn file: {len(data)} bytes"
        seen["old" if data == old else "new"] += 1
    # The kills landed in different places of the write loop, not always before the first write.
    assert seen["new"] > 0 and seen["old"] > 0, seen
    # Temp files a kill left behind are swept at the next session start, and never journaled.
    git(repo, "add", "big.txt")
    journal = Journal(repo)
    journal.snapshot("start")
    listing = git(repo, "ls-tree", "-r", "--name-only", journal.snapshots[0])
    assert TEMP_SUFFIX not in listing
    journal.sweep_temp_files()
    assert not [p for p in repo.iterdir() if p.name.endswith(TEMP_SUFFIX)]


def test_open_regular_refuses_links_fifos_and_folders_without_waiting(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("outside\n")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")  # nobody writes to it: a blocking open would hang the test
    (tmp_path / "folder").mkdir()
    (tmp_path / "plain").write_text("ok\n")
    with pytest.raises(OSError):
        open_regular(tmp_path / "link")  # ELOOP: the link itself is never followed
    for name in ("fifo", "folder"):
        with pytest.raises(NotRegularFile):
            open_regular(tmp_path / name)
    fd, info = open_regular(tmp_path / "plain")
    try:
        assert os.read(fd, 10) == b"ok\n" and info.st_size == 3
    finally:
        os.close(fd)


def test_confined_walk_and_drop_bits_never_go_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "tool"
    victim.write_text("#!/bin/sh\n")
    victim.chmod(0o4755)
    tree = tmp_path / "tree"
    (tree / "real").mkdir(parents=True)
    (tree / "via").symlink_to(outside)
    with pytest.raises(OSError):
        open_dir_confined(tree, "via")
    top = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert drop_bits(top, "via/tool", victim.stat(), stat.S_ISUID) is None
        inside = tree / "real" / "x"
        inside.write_text("x\n")
        inside.chmod(0o4777)
        after = drop_bits(top, "real/x", inside.stat(), stat.S_ISUID | stat.S_IWOTH)
    finally:
        os.close(top)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o4755  # outside: untouched
    assert after is not None and stat.S_IMODE(inside.stat().st_mode) == 0o775


def test_remove_empty_folders_takes_a_deep_chain_up_to_the_stop_and_no_further(tmp_path: Path) -> None:
    """Undo's pruning: past several of its descriptor windows (CHAIN_WINDOW levels each), up to the first
    folder that is not empty, and never through a link on the way."""
    from agent.fs import CHAIN_WINDOW, remove_empty_folders

    root = (tmp_path / "root").resolve()
    depth = 2 * CHAIN_WINDOW + 40
    deepest = root.joinpath(*["d"] * depth)
    deepest.mkdir(parents=True)
    (root / "d" / "d" / "keep.txt").write_text("x")  # the third folder down holds a file
    remove_empty_folders(deepest, root)
    assert (root / "d" / "d").is_dir() and not (root / "d" / "d" / "d").exists()
    (root / "d" / "d" / "keep.txt").unlink()
    remove_empty_folders(root / "d" / "d", root)
    assert root.is_dir() and list(root.iterdir()) == []  # up to the stop, which stays

    elsewhere = (tmp_path / "elsewhere").resolve()
    (elsewhere / "x").mkdir(parents=True)
    (root / "link").symlink_to(elsewhere)
    remove_empty_folders(root / "link" / "x", root)
    assert (elsewhere / "x").is_dir()  # reached only through a link: left alone
