"""`ribbit acp` driven by the protocol SDK's own client side, a replay: model behind it: a whole task through
the protocol, each outcome checked on disk, in git, or in the saved session."""

from __future__ import annotations

import subprocess

from acp import text_block

from agent.session import SessionStore
from tests.acp.helpers import RecordingClient, allow, reject, ribbit_acp, run
from tests.conftest import xml_call


def test_a_task_streams_asks_and_applies_what_it_showed(tmp_path, repo, replay_file):
    model = replay_file(
        "Let me look at calc.py first.\n" + xml_call("Read", file_path="calc.py"),
        "The sign is wrong.\n" + xml_call("Edit", file_path="calc.py", old_string="return a - b", new_string="return a + b"),
        "Fixed: add now adds.",
        "I will add a note.\n" + xml_call("Write", file_path="NOTES.md", content="a note\n"),
        "Understood, no note.",
    )
    client = RecordingClient(answers=[allow(), reject("keep the repository free of notes")])

    async def scenario() -> tuple[str, str, str]:
        async with ribbit_acp(client, f"replay:{model}", stderr=tmp_path / "stderr.txt") as (conn, _process):
            session = await conn.new_session(cwd=str(repo))
            assert session.modes.current_mode_id == "ask"
            assert {m.id for m in session.modes.available_modes} == {"ask", "auto-edit", "full-auto", "plan"}
            first = await conn.prompt(session_id=session.session_id, prompt=[text_block("fix the bug in add")])
            after_first = (repo / "calc.py").read_text()
            second = await conn.prompt(session_id=session.session_id, prompt=[text_block("write a note")])
            return session.session_id, first.stop_reason, second.stop_reason + "|" + after_first

    session_id, first, rest = run(scenario())
    second, after_first = rest.split("|", 1)
    assert (first, second) == ("end_turn", "end_turn")
    # The allowed edit is on disk; the rejected Write left no trace.
    assert after_first == "def add(a, b):\n    return a + b\n"
    assert not (repo / "NOTES.md").exists()

    # Streamed: the model's words as message chunks, in order.
    text = client.text()
    assert text.index("Let me look at calc.py first.") < text.index("The sign is wrong.") < text.index("Fixed: add now adds.")
    calls = client.tool_calls()
    read, edit, write = calls
    assert (read.kind, read.locations[0].path) == ("read", str(repo / "calc.py"))
    assert client.tool_updates(read.tool_call_id)[-1].status == "completed"
    # The Edit carries its diff, and the question showed exactly the change that was applied.
    assert edit.kind == "edit" and edit.title == "Edit calc.py"
    assert edit.locations[0].line == 2
    diff = edit.content[0]
    assert (diff.type, diff.path, diff.old_text, diff.new_text) == ("diff", str(repo / "calc.py"), "return a - b", "return a + b")
    asked_edit, asked_write = client.asked
    shown = asked_edit.tool_call.content[0]
    assert shown.type == "diff" and shown.new_text == after_first and shown.old_text == "def add(a, b):\n    return a - b\n"
    assert {o.kind for o in asked_edit.options} == {"allow_once", "allow_always", "reject_once"}
    assert asked_write.tool_call.content[0].old_text is None and asked_write.tool_call.content[0].new_text == "a note\n"
    assert client.tool_updates(edit.tool_call_id)[-1].status == "completed"
    assert client.tool_updates(write.tool_call_id)[-1].status == "failed"

    # The session is ribbit's own: saved, its rejection reason returned to the model, its journal in git.
    saved = SessionStore(repo).load(session_id)
    results = [m.content for m in saved.messages if m.role == "tool"]
    assert "keep the repository free of notes" in results[-1]
    refs = subprocess.run(["git", "-C", str(repo), "for-each-ref", "refs/ribbit/"], capture_output=True, text=True).stdout
    assert session_id in refs
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


def test_reasoning_streams_as_thought_chunks(tmp_path, repo, replay_file):
    model = replay_file("<think>\nThe sign looks wrong.\n</think>\nadd subtracts.")
    client = RecordingClient()

    async def scenario() -> None:
        async with ribbit_acp(client, f"replay:{model}", stderr=tmp_path / "stderr.txt") as (conn, _process):
            session = await conn.new_session(cwd=str(repo))
            await conn.prompt(session_id=session.session_id, prompt=[text_block("what is wrong?")])

    run(scenario())
    assert "The sign looks wrong." in client.text("agent_thought_chunk")
    assert "add subtracts." in client.text() and "The sign looks wrong." not in client.text()
