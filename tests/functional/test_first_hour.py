"""Issue 32 outside the TUI: real `ribbit` sessions and commands, on real git repositories."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import xml_call
from tests.functional.helpers import ribbit_run, ribbit_subprocess

FIX_ADD = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
ROOT = Path(__file__).resolve().parents[2]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def test_a_turn_that_repeats_itself_is_cut_and_the_model_recovers(capsys, tmp_path, repo, replay_file):
    loop = "I will fix calc.py now. " + "The add function subtracts instead of adding the numbers. " * 300
    turns = [loop, xml_call("Read", file_path="calc.py"), FIX_ADD, "Fixed."]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns), "--mode", "full-auto", "--no-sandbox")
    assert result.code == 0, result.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    messages = [e["message"] for e in result.of_type("message")]
    first = next(m for m in messages if m["role"] == "assistant")
    assert len(first["content"]) < 200 and first["content"].count("subtracts instead") == 1
    notes = [m["content"] for m in messages if m["role"] == "user" and m["content"].startswith("ribbit: your last reply")]
    assert len(notes) == 1 and "repeated the same text" in notes[0]


def test_three_repeating_turns_in_a_row_end_the_run(capsys, tmp_path, repo, replay_file):
    loop = "Let me check calc.py again to be sure it is right. " * 150
    result = ribbit_run(capsys, tmp_path, repo, replay_file(loop, loop, loop, "never reached"))
    assert result.code != 0
    assert "repeated itself in 3 turns" in result.stderr


def test_home_root_and_system_folders_are_refused_before_a_model_loads(capsys, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for folder in (home, Path("/"), Path("/usr")):
        result = ribbit_run(capsys, tmp_path, folder, tmp_path / "no-such-replay.jsonl")
        assert result.code == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "--repo" in lines[0] and "replay file" not in lines[0], folder


def test_an_unwritable_state_folder_is_one_line(capsys, tmp_path, repo, replay_file, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker / "state"))
    result = ribbit_run(capsys, tmp_path, repo, replay_file("never"))
    assert result.code == 1
    assert result.stderr.count("\n") == 1 and "XDG_STATE_HOME" in result.stderr


def test_outside_git_is_said_once_and_the_run_goes_on(capsys, tmp_path, replay_file):
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.txt").write_text("hi\n")
    result = ribbit_run(capsys, tmp_path, folder, replay_file("Nothing to do."))
    assert result.code == 0
    assert result.stderr.count("is not in a git repository") == 1


@pytest.mark.real_model  # through the `default` SPEC, which tests/tiers.py cannot see
def test_the_embedded_model_is_said_to_be_a_demo(capsys, tmp_path, repo):
    result = ribbit_run(capsys, tmp_path, repo, "default", "--max-steps", "1", "--max-turn-tokens", "8")
    assert "does not use the tools" in result.stderr and "--model" in result.stderr


def test_doctor_usage_and_a_missing_model_file(tmp_path):
    helped = ribbit_subprocess("doctor", "--help")
    assert helped.returncode == 0 and "--model" in helped.stdout and "--repo" in helped.stdout
    bogus = ribbit_subprocess("doctor", "--bogus")
    assert bogus.returncode == 2 and "--bogus" in bogus.stderr and "ok " not in bogus.stdout
    missing = ribbit_subprocess("doctor", "--model", str(tmp_path / "none.gguf"), "--repo", str(ROOT))
    assert missing.returncode == 1
    assert any(line.startswith("!! model SPEC") and "does not exist" in line for line in missing.stdout.splitlines())


def test_doctor_from_root_is_not_ok(tmp_path):
    result = ribbit_subprocess("doctor", "--repo", "/")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("!! repository") for line in lines)
    assert not any(line.startswith("ok sandbox writes") or "git is not installed" in line for line in lines)


def test_version_and_run_help():
    version = ribbit_subprocess("--version")
    assert version.returncode == 0 and version.stdout.startswith("ribbit ")
    helped = ribbit_subprocess("run", "--help")
    text = " ".join(helped.stdout.split())
    for option in ("--max-steps N stop after N", "--max-turn-tokens N stop when", "--context N the largest context in tokens the conversation may grow to",
                   "--dry-run"):
        assert option in text, option


def test_dry_run_prints_the_patch_and_leaves_the_checkout_untouched(capsys, tmp_path, repo, replay_file):
    before = git(repo, "status", "--porcelain")
    result = ribbit_run(capsys, tmp_path, repo, replay_file(xml_call("Read", file_path="calc.py"), FIX_ADD, "Fixed."),
                        "--dry-run", "--no-sandbox")
    assert result.code == 0, result.stderr
    assert "+    return a + b" in result.patch
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert git(repo, "status", "--porcelain") == before
    patch = tmp_path / "fix.patch"
    patch.write_text(result.patch)
    git(repo, "apply", str(patch))  # the patch is what a later `git apply` needs
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_ribbit_allow_adds_the_narrow_prefix_lists_and_revokes(repo):
    added = ribbit_subprocess("allow", "--repo", str(repo), "--add", "python3 -m pytest -q tests")
    assert added.returncode == 0 and "'python3 -m pytest'" in added.stdout
    listed = ribbit_subprocess("allow", "--repo", str(repo))
    assert "1. python3 -m pytest" in listed.stdout
    revoked = ribbit_subprocess("allow", "--repo", str(repo), "--remove", "1")
    assert revoked.returncode == 0
    assert "no prefixes allowed" in ribbit_subprocess("allow", "--repo", str(repo)).stdout
    chained = ribbit_subprocess("allow", "--repo", str(repo), "--add", "ls; rm -rf /")
    assert chained.returncode == 2


def test_quantize_into_an_existing_folder_is_refused_up_front(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    result = ribbit_subprocess("quantize", str(ROOT), "-o", str(folder))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "is a folder" in result.stderr
    assert list(folder.iterdir()) == []


def test_plan_mode_works_in_a_read_only_checkout_and_ask_mode_says_why_not(tmp_path, repo, replay_file):
    assert shutil.which("unshare"), "unshare (util-linux) makes the read-only mount"
    replay = replay_file("calc.py subtracts; the plan: change - to +.")
    script = tmp_path / "ro.sh"
    script.write_text(
        f"mount --bind {repo} {repo} && mount -o remount,bind,ro {repo} || exit 99\n"
        f"{sys.executable} -m app.cli run 'plan the fix' --repo {repo} --model replay:{replay} --mode plan; echo plan=$?\n"
        f"{sys.executable} -m app.cli run 'fix it' --repo {repo} --model replay:{replay}; echo ask=$?\n"
    )
    done = subprocess.run(["unshare", "-rm", "sh", str(script)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**__import__("os").environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    assert "plan=0" in done.stdout, done.stderr
    assert "ask=1" in done.stdout
    assert "git hash-object" not in done.stderr
    assert "read-only" in done.stderr and "--mode plan" in done.stderr
