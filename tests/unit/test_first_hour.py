"""Issue 32's pieces below the app: the repetition guard, 'always allow' prefixes, folders ribbit refuses."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from agent.core.approvals import AllowList, command_prefix
from agent.core.repeats import REPEAT_MIN_SPAN, RepetitionGuard
from agent.paths import state_problem, unsuitable_folder

LOOPS = Path(__file__).resolve().parents[2] / "bench" / "data" / "repetition-loops.jsonl"


def feed(text: str, chunk: int = 7) -> RepetitionGuard:
    guard = RepetitionGuard()
    for i in range(0, len(text), chunk):
        if guard.feed(text[i:i + chunk]):
            break
    return guard


# -- the repetition guard --------------------------------------------------------------------------


def test_a_sentence_written_again_and_again_is_cut_soon_after_the_threshold():
    sentence = "The function returns the sum of the two numbers given to it. "
    text = "Let me look at calc.py. " + sentence * 200
    guard = feed(text)
    assert guard.found is not None
    assert "The function returns the sum" in guard.found.unit
    kept = text[: guard.found.keep_chars]
    assert kept.count("returns the sum") == 1  # what is kept ends with the first copy
    assert len(guard.text) < len(text) / 3  # cut long before the 200 copies were written


def test_a_block_of_lines_repeated_is_cut_even_when_its_indentation_drifts():
    block = "    parser.add_option('--quiet', action='store_true', help='say less')\n"
    text = "".join((" " * (i % 3)) + block for i in range(120))
    guard = feed(text)
    assert guard.found is not None and guard.found.copies >= 3


def test_code_with_legitimately_repeated_lines_is_not_cut():
    rows = "".join(f"    ({i}, {i * i}, 'case {i}'),\n" for i in range(200))  # similar lines, not equal
    table = "MATRIX = [\n" + "    [0, 0, 0, 0, 0, 0, 0, 0],\n" * 12 + "]\n"  # a short exact repeat
    closers = "".join(f"def f{i}():\n    if x:\n        return {{\n        }}\n\n\n" for i in range(40))
    for text in (rows, table, closers):
        guard = feed(text)
        assert guard.found is None, guard.found


@pytest.mark.parametrize("folder", ["agent", "app", "tests"])
def test_no_file_of_this_repository_is_cut(folder):
    root = Path(__file__).resolve().parents[2] / folder
    for path in sorted(root.rglob("*.py")):
        guard = feed(path.read_text(encoding="utf-8"), chunk=12)
        assert guard.found is None, (path, guard.found)


def test_the_stdlib_files_with_the_longest_repeats_are_not_cut():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    # Long tables of near-identical lines (bench/repetition.py scans them all).
    for name in ("encodings/cp1252.py", "encodings/mac_roman.py", "html/entities.py", "unicodedata.py"):
        path = stdlib / name
        if path.exists():
            assert feed(path.read_text(encoding="utf-8"), chunk=12).found is None, path


def test_the_recorded_loop_of_the_embedded_model_is_cut_and_its_prose_answers_are_not():
    answers = [json.loads(line) for line in LOOPS.read_text().splitlines()]
    cut = [a for a in answers if feed("".join(a["pieces"])).found is not None]
    assert cut, "the recording holds at least one loop"
    for answer in answers:
        text = "".join(answer["pieces"])
        guard = feed(text)
        if guard.found is None:
            assert guard.longest[0] < REPEAT_MIN_SPAN


# -- 'always allow' ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command, prefix", [
    ("python3 -m pytest -q tests/", "python3 -m pytest"),
    ("python -m pip install -e .", "python -m pip install"),
    ("npm run test -- --watch", "npm run test"),
    ("git diff --stat", "git diff"),
    ("git stash list", "git stash list"),
    ("cargo test --release", "cargo test"),
    ("uv run pytest -x", "uv run pytest"),
    ("ls -la", "ls"),
    ("FOO=1 pytest -q", "FOO=1 pytest"),
    ("git -C sub status", "git -C sub status"),
    ("python -c 'import os'", "python -c 'import os'"),
    ("ls; rm -rf x", ""),
    ("cat a > b", ""),
    ("echo $(whoami)", ""),
])
def test_always_allow_takes_the_narrowest_prefix_that_names_program_and_subcommand(command, prefix):
    assert command_prefix(command) == prefix


def test_an_allowed_prefix_is_saved_matches_its_commands_only_and_can_be_revoked(tmp_path):
    store = tmp_path / "state" / "allow.json"
    allow = AllowList(store)
    allow.add(command_prefix("python3 -m pytest -q"))
    assert json.loads(store.read_text()) == {"allow": ["python3 -m pytest"]}
    again = AllowList(store)
    assert again.allows("python3 -m pytest tests/unit")
    assert not again.allows("python3 -m http.server")
    assert again.remove("python3 -m pytest")
    assert not AllowList(store).allows("python3 -m pytest tests/unit")
    assert json.loads(store.read_text()) == {"allow": []}


# -- folders ----------------------------------------------------------------------------------------


def test_root_home_and_system_folders_are_refused_with_one_line(tmp_path):
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    env = {"HOME": str(home)}
    for folder in ("/", str(home), str(tmp_path / "home"), "/usr", "/usr/lib", "/etc", "/var"):
        why = unsuitable_folder(Path(folder), env)
        assert why is not None and "\n" not in why and "--repo" in why, folder
    project = home / "src" / "project"
    project.mkdir(parents=True)
    assert unsuitable_folder(project, env) is None
    assert unsuitable_folder(tmp_path / "elsewhere", env) is None  # below /tmp is fine


def test_an_unwritable_state_folder_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker / "state"))  # below a file: nothing can be made there
    why = state_problem()
    assert why is not None and "\n" not in why and "XDG_STATE_HOME" in why
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert state_problem() is None
