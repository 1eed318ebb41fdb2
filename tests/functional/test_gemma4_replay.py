"""A whole `ribbit run` session replaying the raw text a Gemma 4 model writes: thought channels, several
calls in one turn, `<|"|>`-quoted strings; every tool runs, and the outcomes are checked on disk, in git
and in the transcript."""

from __future__ import annotations

import json
import subprocess

from tests.functional.helpers import ribbit_run


def gemma_call(name: str, **arguments: object) -> str:
    """A call as Gemma 4 writes it (its template's form: arguments sorted by name, strings in <|"|>)."""
    body = ",".join(f"{k}:" + (f'<|"|>{v}<|"|>' if isinstance(v, str) else json.dumps(v)) for k, v in sorted(arguments.items()))
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


NEW_TEST = "from calc import add\n\n\ndef test_negative():\n    assert add(-1, -2) == -3\n"
TURNS = [
    "<|channel>thought\nThe test fails. Find the code, then read it.<channel|>"
    + gemma_call("Glob", pattern="*.py") + gemma_call("Read", file_path="calc.py"),
    "The sign is wrong: add() subtracts."
    + gemma_call("Edit", file_path="calc.py", old_string="return a - b", new_string="return a + b"),
    gemma_call("Write", file_path="tests/test_negative.py", content=NEW_TEST),
    "<|channel>thought\nRun every test.<channel|>" + gemma_call("Bash", command="python -m pytest -q -p no:cacheprovider", timeout=120),
    "Fixed: add() now adds, and a new test covers negative numbers.",
]


def test_a_gemma_format_session_runs_every_tool(capsys, tmp_path, repo, replay_file):
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*TURNS), stdin="y\ny\ny\n")
    assert result.code == 0, result.stderr
    # On disk: the edit and the new file, byte for byte.
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (repo / "tests" / "test_negative.py").read_text() == NEW_TEST
    # In git: the session's patch applies in reverse to the changed tree, and names both files.
    assert "+    return a + b" in result.patch and "+++ b/tests/test_negative.py" in result.patch
    subprocess.run(["git", "-C", str(repo), "apply", "-R", "--check"], input=result.patch, text=True, check=True)
    # In the transcript: each call parsed from Gemma's format, run, and answered in order.
    messages = [e["message"] for e in result.of_type("message")]
    calls = [c["function"] for m in messages if m["role"] == "assistant" and m["tool_calls"] for c in m["tool_calls"]]
    assert [c["name"] for c in calls] == ["Glob", "Read", "Edit", "Write", "Bash"]
    assert json.loads(calls[2]["arguments"]) == {"file_path": "calc.py", "new_string": "return a + b", "old_string": "return a - b"}
    assert json.loads(calls[4]["arguments"]) == {"command": "python -m pytest -q -p no:cacheprovider", "timeout": 120}
    glob, read, edit, write, bash = result.tool_results()
    assert "calc.py" in glob and "test_calc.py" in glob
    assert "     2\t    return a - b" in read
    assert "a + b" in edit and not edit.startswith("Error") and not write.startswith("Error")
    assert "2 passed" in bash
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert assistants[0]["reasoning_content"] == "The test fails. Find the code, then read it." and assistants[0]["content"] == ""
    assert assistants[1]["content"] == "The sign is wrong: add() subtracts." and assistants[1]["reasoning_content"] is None
    assert assistants[3]["reasoning_content"] == "Run every test."
    assert assistants[-1]["content"] == TURNS[-1] and assistants[-1]["tool_calls"] is None
    assert [d["decision"] for d in result.of_type("approval")] == ["approved"] * 3  # Edit, Write, Bash
    assert result.events[-1]["stop_reason"] == "finished" and result.events[-1]["steps"] == 5


def test_malformed_gemma_calls_go_back_to_the_model_as_errors(capsys, tmp_path, repo, replay_file):
    turns = [
        '<|tool_call>call:Read{file_path:calc.py}<tool_call|>',  # an unquoted string
        '<|tool_call>call:Read{file_path:<|"|>calc.py<|"|>',  # cut off before <tool_call|>
        gemma_call("Read", file_path="calc.py"),
        "done",
    ]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns))
    assert result.code == 0 and result.events[-1]["steps"] == 4
    feedback = [m["content"] for m in (e["message"] for e in result.of_type("message")) if m["role"] == "user"][1:]
    assert len(feedback) == 2 and all(f.startswith("Error: your tool call could not be read") for f in feedback)
    assert "must be a <|\"|>-quoted string" in feedback[0] and "not closed with <tool_call|>" in feedback[1]
    assert "def add" in result.tool_results()[0]


def test_the_live_stream_shows_gemmas_reasoning_apart_and_never_its_markup(tmp_path, repo, replay_file):
    """What the TUI and `ribbit run` show while the model writes: the replay streams the raw text in
    pieces, so markers arrive split across chunks."""
    from agent.core.approvals import RejectAll
    from agent.core.events import ReasoningDelta, TextDelta
    from agent.session.workspace import open_workspace
    from models.replay import ReplayModel

    events: list[object] = []
    workspace = open_workspace(ReplayModel(replay_file(*TURNS)), repo, mode="ask", approver=RejectAll(),
                               sink=events.append, watch=False)
    try:
        assert workspace.session.run("fix the bug").stop_reason == "finished"
    finally:
        workspace.close()
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    visible = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert reasoning == "The test fails. Find the code, then read it.Run every test."
    assert visible == "The sign is wrong: add() subtracts." + TURNS[-1]
    assert "<|" not in visible + reasoning and "|>" not in visible + reasoning
