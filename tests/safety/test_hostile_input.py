"""Hole 8: input that used to end `ribbit run` in a traceback (exit 1, no summary).

Every case runs `ribbit run` as a subprocess on a real repository with the replayed model and
checks the contract: the right exit code, no traceback, a summary as the transcript's last line,
every transcript line valid JSON, the model told what was wrong, and the files as they should be.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import xml_call
from tests.safety.cli import CliRun, ribbit_cli, ribbit_cli_interrupted, write_replay

NESTED = "[" * 100_000
UNDER_JSON_LIMIT = "[" * 900 + "]" * 900  # parses, then meets a RecursionError further down


@pytest.mark.parametrize(
    ("dialect", "turn"),
    [
        ("qwen3_coder", f"<tool_call>\n<function=Read>\n<parameter=file_path>\ncalc.py\n</parameter>\n"
                        f"<parameter=offset>\n{NESTED}\n</parameter>\n</function>\n</tool_call>"),
        ("hermes", '<tool_call>{"name": "Read", "arguments": {"file_path": ' + NESTED + "}}</tool_call>"),
        ("hermes-900", '<tool_call>{"name": "Read", "arguments": {"file_path": ' + UNDER_JSON_LIMIT + "}}</tool_call>"),
        ("json", '{"tool": "Read", "arguments": {"file_path": ' + NESTED + "}}"),
        ("json-900", '{"tool": "Read", "arguments": {"file_path": ' + UNDER_JSON_LIMIT + "}}"),
        ("gemma4", "<|tool_call>call:Read{file_path:" + NESTED + "}<tool_call|>"),
        ("gemma4-900", "<|tool_call>call:Read{file_path:" + UNDER_JSON_LIMIT + "}<tool_call|>"),
    ],
    ids=["qwen3_coder", "hermes", "hermes-900-deep", "json", "json-900-deep", "gemma4", "gemma4-900-deep"],
)
def test_deeply_nested_tool_calls_are_told_to_the_model(repo: Path, tmp_path: Path, dialect: str, turn: str) -> None:
    before = (repo / "calc.py").read_bytes()
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", turn, "done"), "--mode", "full-auto")
    run.assert_clean_exit(0)
    told = run.tool_results() + run.user_notes()
    assert len(told) == 1 and told[0].startswith("Error:"), told
    assert any(word in told[0] for word in ("nested too deeply", "nest more than", "valid integer")), told[0]
    assert (repo / "calc.py").read_bytes() == before


def test_lone_surrogates_from_the_model_never_reach_disk_transcript_or_terminal(repo: Path, tmp_path: Path) -> None:
    before = (repo / "calc.py").read_bytes()
    turns = [
        "Thinking about \ud800 this.\n" + xml_call("Read", file_path="calc.py"),
        xml_call("Write", file_path="new.txt", content="a\ud800b\n"),
        xml_call("Write", file_path="n\udfff.txt", content="ok\n"),
        xml_call("Bash", command="true"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a \udcff b"),
        xml_call("Glob", pattern="*.txt"),
        "done \udc80",
    ]
    (repo / "x\udcff.txt").write_bytes(b"x\n")  # a file name that is not UTF-8: Glob lists it
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    # Each write is refused as an unreadable call (three in a row would end the run: exit 1).
    run.assert_clean_exit(0)
    assert "Thinking about \\ud800 this." in run.err  # shown escaped on the terminal
    notes = run.user_notes()
    assert len(notes) == 3 and all("lone surrogate" in note for note in notes), notes
    assert not (repo / "new.txt").exists() and not [p for p in repo.iterdir() if p.name.startswith("n") and p.suffix == ".txt"]
    assert (repo / "calc.py").read_bytes() == before
    assert "x\ufffd.txt" in run.tool_results()[-1]  # cleaned for the model (and its tokenizer)
    assistant = [e["message"]["content"] for e in run.events if e["type"] == "message" and e["message"]["role"] == "assistant"]
    assert assistant[0] == "Thinking about \ufffd this." and assistant[-1] == "done \ufffd"


def test_task_text_that_is_not_utf8_is_read(repo: Path, tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "r.jsonl", "done")
    from_stdin = ribbit_cli(tmp_path, repo, replay, "--mode", "full-auto", task="-", stdin=b"fix \xff the bug\n\n")
    from_stdin.assert_clean_exit(0)
    from_argv = ribbit_cli(tmp_path, repo, replay, "--mode", "full-auto", task="fix \udcff the bug")  # arrives as byte \xff
    from_argv.assert_clean_exit(0)
    for run in (from_stdin, from_argv):
        task = next(e["message"]["content"] for e in run.events if e["type"] == "message" and e["message"]["role"] == "user")
        assert task == "fix \ufffd the bug"


def test_a_nul_byte_in_a_bash_command_is_an_error_result(repo: Path, tmp_path: Path) -> None:
    turns = [xml_call("Bash", command="touch made.txt\x00; rm -f calc.py"), "done"]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    run.assert_clean_exit(0)
    (result,) = run.tool_results()
    assert result == "Error: command contains a NUL byte; bash cannot run it"
    assert (repo / "calc.py").exists() and not (repo / "made.txt").exists()


def test_glob_with_a_bad_character_range_is_an_error_result(repo: Path, tmp_path: Path) -> None:
    turns = [xml_call("Glob", pattern="[z-a]*.py"), xml_call("Glob", pattern="[a-z]*.py"), "done"]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    run.assert_clean_exit(0)
    bad, good = run.tool_results()
    assert bad.startswith("Error: bad pattern") and "z-a" in bad
    assert sorted(good.splitlines()) == ["calc.py", "test_calc.py"]


@pytest.mark.parametrize("git_repo", [True, False], ids=["git", "plain-folder"])
def test_a_2000_deep_path_in_every_tool(repo: Path, tmp_path: Path, git_repo: bool, removes_deep_trees: None) -> None:
    if not git_repo:
        import shutil

        shutil.rmtree(repo / ".git")
    deep = "/".join(["a"] * 2000)  # 4,000 characters: just under PATH_MAX with the repo's own path
    too_deep = "b/" * 2100 + "x.txt"  # past PATH_MAX
    make_tree = "python3 -c \"import os\nfor _ in range(2000):\n    os.mkdir('a'); os.chdir('a')\nopen('f.txt','w').write('x\\n')\""
    turns = [
        xml_call("Bash", command=make_tree),
        xml_call("Read", file_path=f"{deep}/f.txt"),
        xml_call("Edit", file_path=f"{deep}/f.txt", old_string="x", new_string="z"),
        xml_call("Write", file_path=f"{deep}/g.txt", content="y\n"),
        xml_call("Glob", pattern="*.txt", path=deep),
        xml_call("Glob", pattern="**/f.txt"),
        xml_call("Write", file_path=too_deep, content="y\n"),
        xml_call("Read", file_path=too_deep),
        xml_call("Glob", pattern="*", path=too_deep),
        "done",
    ]
    try:
        run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
        check_deep_session(run, repo, git_repo)
    finally:  # pytest's own cleanup recurses (shutil.rmtree) and would fail on this tree
        subprocess.run(["rm", "-rf", str(repo / "a")], check=False)


def check_deep_session(run: CliRun, repo: Path, git_repo: bool) -> None:
    run.assert_clean_exit(0)
    results = run.tool_results()
    assert results[1] == "     1\tx"
    assert results[2].startswith("Edited") and results[3].startswith("Created")
    # Glob lists the repository first: git does at any depth; the .gitignore walk of a plain
    # folder recurses (os.walk, Python 3.11) and meets the depth as an Error: result, not a crash.
    listed = sorted(line.rsplit("/", 1)[-1] for line in results[4].splitlines())
    assert listed == ["f.txt", "g.txt"] or (not git_repo and results[4].startswith("Error:")), results[4]
    assert results[5].endswith("/f.txt") or (not git_repo and results[5].startswith("Error:")), results[5]
    assert all(r.startswith("Error:") and "too long" in r for r in results[6:9]), results[6:9]
    leaf = repo.joinpath(*["a"] * 2000)
    assert (leaf / "f.txt").read_text() == "z\n" and (leaf / "g.txt").read_text() == "y\n"
    assert not (repo / "b").exists()


def test_a_ctrl_c_after_the_run_has_ended_keeps_its_exit_status() -> None:
    # A second Ctrl+C that lands while Python exits (after the summary and the patch) must not turn the
    # exit status into death by SIGINT (-2): the `ribbit` command is app.cli.entry.
    script = ("import os, signal, sys\nfrom app import cli\ncli.main = lambda argv=None: 130\n"
              "code = cli.entry()\nos.kill(os.getpid(), signal.SIGINT)\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2], capture_output=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert b"Traceback" not in done.stderr


def running(text: str) -> bool:
    """Whether a process whose command line holds `text` runs (the sandboxed shell of a Bash call)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text.encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_while_bash_runs_ends_with_130_and_a_summary(repo: Path, tmp_path: Path, signals: int) -> None:
    started, finished = repo / "started", repo / "finished"
    command = "touch started; sleep 4; touch finished"
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), xml_call("Bash", command="touch next"), "done")
    # A command writes through an overlay applied when it ends (agent.sandbox.overlay): `started` shows in
    # the checkout only then, so its process is looked for instead.
    run = ribbit_cli_interrupted(tmp_path, repo, replay, lambda: started.exists() or running(command), "--mode",
                                 "full-auto", signals=signals)
    assert run.code == 130, run.err
    assert b"Traceback" not in run.stderr, run.err
    if signals == 1:  # a second Ctrl+C stops waiting for the summary; one Ctrl+C always gets it
        assert run.summary()["stop_reason"] == "interrupted"
        assert run.tool_results()[0].endswith("Command stopped by the user")
    import time

    time.sleep(5)  # long enough for the command to have finished, had it survived
    assert not finished.exists() and not (repo / "next").exists()
