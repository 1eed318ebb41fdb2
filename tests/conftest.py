"""Fixtures shared by every test: real temporary git repositories and replay model files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from models.embedded import copy_path, embedded_model, shipped_model_path

pytest_plugins = ["tests.tiers"]  # quick and slow tiers, from what each test uses


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def embedded_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model's Q8_0 copy (models/embedded.py), made once per test run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("embedded")))
        return embedded_model().path


@pytest.fixture(autouse=True)
def isolated_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, embedded_copy: Path) -> Path:
    """Per-project settings and private journals go to a temp folder, never the developer's home."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    # Each test's cache holds the run's embedded copy (a hard link), so no test pays for making it.
    target = copy_path(shipped_model_path())
    if embedded_copy != shipped_model_path():
        target.parent.mkdir(parents=True)
        try:
            os.link(embedded_copy, target)
        except OSError:  # a temp folder on another file system
            shutil.copyfile(embedded_copy, target)
    # The user's own settings and global AGENTS.md (agent.core.instructions) stay out of the tests.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("RIBBIT_MODEL", raising=False)
    return state


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit: a small buggy module and its test."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "test@example.com")
    git(root, "config", "user.name", "Test")
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


@pytest.fixture
def removes_deep_trees(tmp_path: Path):
    """For tests that build 2,000-deep folders: remove them at once (rm copes with any depth; pytest's
    own recursive cleanup of old temp folders would fail on them at a later run's exit)."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


def xml_call(name: str, **params: object) -> str:
    """A Qwen3-Coder XML tool call, as FrogNano writes it."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


@pytest.fixture
def replay_file(tmp_path: Path):
    """Write a replay model: one raw assistant turn per line."""

    def write(*turns: str, name: str = "replay.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
        return path

    return write


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root except .git internals, with its exact bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


@pytest.fixture(scope="session")
def thinking_qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny qwen35 GGUF with the real Qwen3.5 chat template (tests/engine/tiny_qwen35.py), built once."""
    from tests.engine.tiny_qwen35 import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("thinking-qwen35"))
