"""The one prune of saved llama.cpp states (models.llama_state): the disk cache's count and the saved
points' byte budget are the same rule, least recently used first, descriptions going with their states."""

from __future__ import annotations

import os
from pathlib import Path

from models.llama_state import prune


def make_states(folder: Path, sizes: list[int]) -> list[Path]:
    """State files state-0 (oldest) … state-N (newest), each with its description."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, size in enumerate(sizes):
        path = folder / f"state-{index}.state"
        path.write_bytes(b"s" * size)
        path.with_suffix(".json").write_text("{}")
        os.utime(path, (1000 + index, 1000 + index))
        paths.append(path)
    return paths


def left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def test_a_count_keeps_the_newest(tmp_path: Path) -> None:
    paths = make_states(tmp_path, [10] * 5)
    deleted = prune(tmp_path, max_files=2)
    assert deleted == paths[:3]
    assert left(tmp_path) == ["state-3.json", "state-3.state", "state-4.json", "state-4.state"]


def test_a_budget_drops_the_oldest_until_the_rest_fit_and_spares_what_is_kept(tmp_path: Path) -> None:
    paths = make_states(tmp_path / "projects" / "a", [100, 100, 100, 100])
    prune(tmp_path, budget=250, keep=[paths[0]])
    assert left(tmp_path / "projects" / "a") == ["state-0.json", "state-0.state", "state-3.json", "state-3.state"]


def test_within_both_limits_nothing_goes(tmp_path: Path) -> None:
    make_states(tmp_path, [10, 10])
    assert prune(tmp_path, budget=20, max_files=2) == []
    assert len(left(tmp_path)) == 4


def test_a_used_state_counts_as_new(tmp_path: Path) -> None:
    paths = make_states(tmp_path, [10, 10, 10])
    os.utime(paths[0])  # what load_file does after a load
    prune(tmp_path, max_files=2)
    assert not paths[1].exists() and paths[0].exists() and paths[2].exists()
