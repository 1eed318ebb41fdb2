"""Whole sessions through `ribbit run` with the deterministic replay model, on real git repos."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import tree_bytes, xml_call
from tests.functional.helpers import ribbit_run, ribbit_subprocess

FIX = [
    xml_call("Read", file_path="calc.py"),
    "The sign is wrong.\n" + xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
    xml_call("Bash", command="python -m pytest -q test_calc.py"),
    "Fixed: add() now adds.",
]


def test_fix_session_approved_prints_the_patch_and_a_wellformed_transcript(capsys, tmp_path, repo, replay_file):
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*FIX), stdin="y\ny\n")
    assert result.code == 0, result.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert "-    return a - b\n+    return a + b" in result.patch and "diff --git a/calc.py b/calc.py" in result.patch
    # The patch is a real git patch: it applies in reverse to the changed tree.
    subprocess.run(["git", "-C", str(repo), "apply", "-R", "--check"], input=result.patch, text=True, check=True)
    types = [e["type"] for e in result.events]
    assert types[-1] == "summary" and types.count("summary") == 1
    summary = result.events[-1]
    assert summary["stop_reason"] == "finished" and summary["steps"] == 4 and summary["files_changed"] == ["calc.py"]
    assert len(result.of_type("usage")) == 4
    for usage in result.of_type("usage"):
        assert usage["prompt_tokens"] == usage["cached_tokens"] + usage["evaluated_tokens"]
    assert [e["decision"] for e in result.of_type("approval")] == ["approved", "approved"]
    messages = [e["message"] for e in result.of_type("message")]
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    calls = [c for m in messages if m["role"] == "assistant" and m["tool_calls"] for c in m["tool_calls"]]
    tool_ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert [c["id"] for c in calls] == tool_ids
    assert all(c["type"] == "function" and isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)
    assert "1 passed" in result.tool_results()[2]
    assert messages[-1] == {"role": "assistant", "content": "Fixed: add() now adds.", "reasoning_content": None, "tool_calls": None}


def test_ask_mode_with_all_no_leaves_the_repo_byte_identical(capsys, tmp_path, repo, replay_file):
    (repo / "notes.txt").write_bytes(b"uncommitted\r\nwork\n")  # the user's own uncommitted file
    before = tree_bytes(repo)
    git_state = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout
    turns = [
        *FIX[:2],
        xml_call("Write", file_path="new_module.py", content="x = 1\n"),
        xml_call("Bash", command="touch created_by_bash && rm calc.py"),
        xml_call("Edit", file_path="notes.txt", old_string="work", new_string="play"),
        "Giving up.",
    ]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns), stdin="n\nn: not like that\nn\n")
    assert result.code == 0
    assert tree_bytes(repo) == before
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout == git_state
    assert result.patch == ""
    decisions = result.of_type("approval")
    assert [d["decision"] for d in decisions] == ["rejected"] * 3  # Edit, Write, Bash; the last Edit was never read
    assert decisions[1]["reason"] == "not like that"
    assert "not like that" in result.tool_results()[2]


def test_end_of_input_means_no(capsys, tmp_path, repo, replay_file):
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*FIX), stdin="")
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert all(d["decision"] == "rejected" for d in result.of_type("approval"))


def test_task_from_stdin_then_decisions(capsys, tmp_path, repo, replay_file):
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*FIX), task="-", stdin="fix add\nplease\n\ny\ny\n")
    assert result.code == 0
    user = [e["message"]["content"] for e in result.of_type("message") if e["message"]["role"] == "user"]
    assert user[0] == "fix add\nplease"
    assert (repo / "calc.py").read_text().endswith("a + b\n")


def test_auto_edit_applies_without_asking_and_allow_list_runs_read_only_bash(capsys, tmp_path, repo, replay_file):
    turns = [FIX[0], FIX[1], xml_call("Bash", command="ls"), "done"]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns), "--mode", "auto-edit", stdin="")
    assert result.code == 0
    assert result.of_type("approval") == []
    assert "calc.py" in result.tool_results()[2]


def test_step_limit_exits_3(capsys, tmp_path, repo, replay_file):
    turns = [xml_call("Glob", pattern=f"*{i}") for i in range(5)]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns), "--max-steps", "2")
    assert result.code == 3
    assert result.events[-1]["stop_reason"] == "max_steps" and result.events[-1]["steps"] == 2


def test_turn_token_limit_exits_3(capsys, tmp_path, repo, replay_file):
    result = ribbit_run(capsys, tmp_path, repo, replay_file("word " * 50), "--max-turn-tokens", "5")
    assert result.code == 3 and result.events[-1]["stop_reason"] == "turn_tokens"


def test_three_malformed_turns_in_a_row_end_with_error(capsys, tmp_path, repo, replay_file):
    bad = "<tool_call>\n<function=Read>\n<parameter=file_path>\ncalc.py\n"
    result = ribbit_run(capsys, tmp_path, repo, replay_file(bad, bad, bad, "never reached"))
    assert result.code == 1
    assert result.events[-1]["stop_reason"] == "error" and result.events[-1]["steps"] == 3
    feedback = [e["message"]["content"] for e in result.of_type("message") if e["message"]["role"] == "user"][1:]
    assert len(feedback) == 2 and all("could not be read" in f and "not closed" in f for f in feedback)


def test_malformed_count_resets_after_a_good_turn(capsys, tmp_path, repo, replay_file):
    bad = "<tool_call>\nno function here\n</tool_call>"
    good = xml_call("Glob", pattern="*.py")
    result = ribbit_run(capsys, tmp_path, repo, replay_file(bad, bad, good, bad, bad, "done"))
    assert result.code == 0 and result.events[-1]["steps"] == 6


def test_bad_calls_become_error_observations_and_the_loop_goes_on(capsys, tmp_path, repo, replay_file):
    turns = [
        xml_call("Delete", file_path="calc.py"),
        xml_call("Read", path="calc.py"),
        xml_call("Read", file_path="../../etc/passwd"),
        "done",
    ]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns))
    assert result.code == 0
    unknown, invalid, escape = result.tool_results()
    assert unknown.startswith("Error: there is no tool named 'Delete'")
    assert invalid.startswith("Error: invalid arguments for Read") and "file_path" in invalid
    assert escape.startswith("Error:") and "outside the repository" in escape


def test_identical_call_three_times_warns_the_model(capsys, tmp_path, repo, replay_file):
    same = xml_call("Read", file_path="calc.py")
    result = ribbit_run(capsys, tmp_path, repo, replay_file(same, same, same, "done"))
    results = result.tool_results()
    assert "same Read call 3 times" not in results[1]
    assert "same Read call 3 times in a row" in results[2]


def test_agents_md_is_in_the_system_prompt(capsys, tmp_path, repo, replay_file):
    (repo / "AGENTS.md").write_text("Run tests with `make check`.\n")
    result = ribbit_run(capsys, tmp_path, repo, replay_file("ok"))
    system = result.of_type("message")[0]["message"]
    assert system["role"] == "system" and "make check" in system["content"] and str(repo) in system["content"]


def test_replay_dialects_hermes_and_json(capsys, tmp_path, repo, replay_file):
    hermes = '<tool_call>\n{"name": "Read", "arguments": {"file_path": "calc.py"}}\n</tool_call>'
    plain = '{"tool": "Glob", "arguments": {"pattern": "*.py"}}'
    for text, needle in ((hermes, "def add"), (plain, "calc.py")):
        result = ribbit_run(capsys, tmp_path, repo, replay_file(text, "done", name=f"{len(text)}.jsonl"))
        assert result.code == 0 and needle in result.tool_results()[0]


def test_user_errors_are_one_line_with_the_right_exit_code(tmp_path, repo):
    missing = ribbit_subprocess("run", "x", "--repo", str(repo), "--model", str(tmp_path / "nope.gguf"))
    assert missing.returncode == 1
    assert missing.stderr.strip().count("\n") == 0 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
    notgguf = tmp_path / "fake.gguf"
    notgguf.write_text("hello")
    bad = ribbit_subprocess("run", "x", "--repo", str(repo), "--model", str(notgguf))
    assert bad.returncode == 1 and "not a GGUF file" in bad.stderr and "Traceback" not in bad.stderr
    norepo = ribbit_subprocess("run", "x", "--repo", str(tmp_path / "nowhere"), "--model", "replay:x")
    assert norepo.returncode == 1 and "Traceback" not in norepo.stderr
    usage = ribbit_subprocess("run", "x", "--max-steps", "zero")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    corrupt = tmp_path / "bad.jsonl"
    corrupt.write_text("not json\n")
    replay = ribbit_subprocess("run", "x", "--repo", str(repo), "--model", f"replay:{corrupt}")
    assert replay.returncode == 1 and "bad.jsonl:1" in replay.stderr


def test_patch_out_writes_the_patch_to_a_file(capsys, tmp_path, repo, replay_file):
    out = tmp_path / "fix.patch"
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*FIX), "--patch-out", str(out), stdin="y\ny\n")
    assert result.code == 0 and result.patch == ""
    assert "+    return a + b" in out.read_text()


def test_a_folder_that_is_not_a_git_repo_works(capsys, tmp_path, replay_file):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    result = ribbit_run(capsys, tmp_path, plain, replay_file(*FIX[:2], "done"), stdin="y\n")
    assert result.code == 0 and "+    return a + b" in result.patch
    assert not (plain / ".git").exists()


def test_several_calls_in_one_turn_run_in_order(capsys, tmp_path, repo, replay_file):
    turn = xml_call("Read", file_path="calc.py") + "\n" + xml_call(
        "Edit", file_path="calc.py", old_string="a - b", new_string="a + b"
    ) + "\n" + xml_call("Bash", command="cat calc.py")
    result = ribbit_run(capsys, tmp_path, repo, replay_file(turn, "done"), "--mode", "full-auto")
    assert result.code == 0
    read, edit, bash = result.tool_results()
    assert "a - b" in read and edit.startswith("Edited calc.py") and "a + b" in bash
    assistant = [e["message"] for e in result.of_type("message") if e["message"]["role"] == "assistant"][0]
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["Read", "Edit", "Bash"]


def test_cancel_stops_the_turn_and_the_session_can_go_on(tmp_path, repo, replay_file):
    import threading

    from agent.core.approvals import RejectAll
    from agent.session.workspace import open_workspace
    from models.replay import ReplayModel

    events = []
    model = ReplayModel(replay_file("word " * 400, "second answer"), chunk_delay=0.01)
    workspace = open_workspace(model, repo, mode="ask", approver=RejectAll(), sink=events.append)
    timer = threading.Timer(0.3, workspace.session.cancel)
    timer.start()
    first = workspace.session.run("write a lot")
    timer.join()
    assert first.stop_reason == "interrupted"
    partial = [m for m in workspace.session.messages if m.role == "assistant"][0].content
    assert 0 < len(partial.split()) < 400
    second = workspace.session.run("go on")
    assert second.stop_reason == "finished"
    assert workspace.session.messages[-1].content == "second answer"
