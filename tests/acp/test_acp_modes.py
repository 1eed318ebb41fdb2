"""Modes, commands, cancel, resume and prompt content through `ribbit acp`, outcomes on disk and in git."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from acp import embedded_text_resource, resource_block, resource_link_block, text_block
from acp.exceptions import RequestError

from agent.session import SessionStore, project_allow_list
from tests.acp.helpers import RecordingClient, allow, ribbit_acp, run
from tests.conftest import xml_call

LONG = " ".join(f"word{n}" for n in range(400))


def journal_refs(repo) -> str:
    return subprocess.run(["git", "-C", str(repo), "for-each-ref", "refs/ribbit/"], capture_output=True, text=True).stdout


def running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def test_full_auto_runs_a_command_in_the_sandbox_without_asking(tmp_path, repo, replay_file):
    model = replay_file("Running it.\n" + xml_call("Bash", command="echo made > made.txt && cat made.txt"), "Done.")
    client = RecordingClient()

    async def scenario() -> str:
        async with ribbit_acp(client, f"replay:{model}", "--mode", "full-auto", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            return (await conn.prompt(session_id=session.session_id, prompt=[text_block("make a file")])).stop_reason

    assert run(scenario()) == "end_turn"
    assert (repo / "made.txt").read_text() == "made\n"
    assert client.asked == []
    bash = client.tool_calls()[0]
    assert bash.kind == "execute" and bash.title == "echo made > made.txt && cat made.txt"
    result = client.tool_updates(bash.tool_call_id)[-1]
    assert result.status == "completed" and "made" in result.content[0].content.text


def test_always_allow_remembers_the_commands_narrow_prefix(tmp_path, repo, replay_file):
    model = replay_file(xml_call("Bash", command="touch made.txt"), "Done.")
    client = RecordingClient(answers=[allow("allow_always")])

    async def scenario() -> None:
        async with ribbit_acp(client, f"replay:{model}", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            await conn.prompt(session_id=session.session_id, prompt=[text_block("touch it")])

    run(scenario())
    assert (repo / "made.txt").exists()
    (asked,) = client.asked
    assert asked.tool_call.kind == "execute" and "touch made.txt" in asked.tool_call.content[0].content.text
    assert project_allow_list(repo).user == ["touch"]


def test_cancel_stops_a_command_and_the_session_goes_on(tmp_path, repo, replay_file):
    model = replay_file(
        xml_call("Bash", command="sleep 3071; echo late > late.txt"),
        xml_call("Read", file_path="calc.py"),
        "Fixing.\n" + xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        "Done.",
    )
    client = RecordingClient()

    async def scenario() -> tuple[str, str, bool]:
        async with ribbit_acp(client, f"replay:{model}", "--mode", "full-auto", stderr=tmp_path / "err") as (conn, process):
            session = await conn.new_session(cwd=str(repo))
            turn = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[text_block("wait")]))
            await client.wait_for(lambda: client.tool_calls())
            await client.wait_for(lambda: running("sleep 3071"), timeout=30)
            await conn.cancel(session_id=session.session_id)
            stopped = (await turn).stop_reason
            alive = process.returncode is None
            after = await conn.prompt(session_id=session.session_id, prompt=[text_block("now fix add")])
            return stopped, after.stop_reason, alive

    stopped, after, alive = run(scenario())
    assert (stopped, after, alive) == ("cancelled", "end_turn", True)
    assert not running("sleep 3071")
    assert not (repo / "late.txt").exists()
    # The process and the journal survived: the next turn's edit landed and is journaled.
    assert "a + b" in (repo / "calc.py").read_text()
    assert "refs/ribbit/" in journal_refs(repo)


def test_cancel_mid_stream_ends_the_turn_cancelled(tmp_path, repo, replay_file):
    model = replay_file(LONG, "Next.")
    client = RecordingClient()

    async def scenario() -> str:
        async with ribbit_acp(client, f"replay:{model}#delay=0.02", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            turn = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[text_block("talk")]))
            await client.wait_for(lambda: client.of_kind("agent_message_chunk"))
            # A second prompt while one runs is a protocol error, and the first goes on.
            with pytest.raises(RequestError, match="already running"):
                await conn.prompt(session_id=session.session_id, prompt=[text_block("again")])
            await conn.cancel(session_id=session.session_id)
            return (await turn).stop_reason

    assert run(scenario()) == "cancelled"
    assert "word399" not in client.text()


def test_plan_mode_refuses_a_write(tmp_path, repo, replay_file):
    model = replay_file(xml_call("Write", file_path="plan.txt", content="x\n"), "1. change calc.py")
    client = RecordingClient(answers=[allow()])

    async def scenario() -> str:
        async with ribbit_acp(client, f"replay:{model}", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            with pytest.raises(RequestError):
                await conn.set_session_mode(session_id=session.session_id, mode_id="review")
            await conn.set_session_mode(session_id=session.session_id, mode_id="plan")
            return (await conn.prompt(session_id=session.session_id, prompt=[text_block("plan it")])).stop_reason

    assert run(scenario()) == "end_turn"
    assert not (repo / "plan.txt").exists()
    assert [u.current_mode_id for u in client.of_kind("current_mode_update")] == ["plan"]
    write = client.tool_calls()[0]
    assert client.tool_updates(write.tool_call_id)[-1].status == "failed"
    assert client.asked == []


def test_undo_through_the_advertised_command(tmp_path, repo, replay_file):
    model = replay_file(xml_call("Read", file_path="calc.py"),
                        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"), "Done.")
    client = RecordingClient()
    original = (repo / "calc.py").read_text()

    async def scenario() -> tuple[str, str]:
        async with ribbit_acp(client, f"replay:{model}", "--mode", "auto-edit", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            commands = await client.wait_for(lambda: client.of_kind("available_commands_update"))
            assert {"undo", "compact", "clear", "rewind"} <= {c.name for c in commands[0].available_commands}
            await conn.prompt(session_id=session.session_id, prompt=[text_block("fix add")])
            edited = (repo / "calc.py").read_text()
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("/undo")])
            return edited, reply.stop_reason

    edited, stop = run(scenario())
    assert edited != original and "a + b" in edited
    assert stop == "end_turn"
    assert (repo / "calc.py").read_text() == original
    assert client.asked == []


def test_load_replays_the_saved_history_before_its_reply(tmp_path, repo, replay_file):
    model = replay_file("Looking.\n" + xml_call("Read", file_path="calc.py"), "calc.py subtracts.", "Still subtracts.")
    first, second = RecordingClient(), RecordingClient()

    async def start() -> str:
        async with ribbit_acp(first, f"replay:{model}", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            await conn.prompt(session_id=session.session_id, prompt=[text_block("what does calc do?")])
            return session.session_id

    async def resume(session_id: str) -> tuple[int, str]:
        async with ribbit_acp(second, f"replay:{model}", stderr=tmp_path / "err") as (conn, _):
            listed = await conn.list_sessions(cwd=str(repo))
            assert [(s.session_id, s.title) for s in listed.sessions] == [(session_id, "what does calc do?")]
            with pytest.raises(RequestError, match="no saved session"):
                await conn.load_session(cwd=str(repo), session_id="20990101-000000-abcdef")
            await conn.load_session(cwd=str(repo), session_id=session_id)
            replayed = len(second.updates)
            reply = await conn.prompt(session_id=session_id, prompt=[text_block("and now?")])
            return replayed, reply.stop_reason

    session_id = run(start())
    replayed, stop = run(resume(session_id))
    history = [u for _, u in second.updates[:replayed]]
    kinds = [u.session_update for u in history]
    assert "user_message_chunk" in kinds and "tool_call" in kinds
    user = next(u for u in history if u.session_update == "user_message_chunk")
    assert user.content.text.startswith("what does calc do?")
    said = "".join(u.content.text for u in history if u.session_update == "agent_message_chunk")
    assert "calc.py subtracts." in said
    assert stop == "end_turn"
    assert [t.prompt for t in SessionStore(repo).load(session_id).tasks] == ["what does calc do?", "and now?"]


def test_linked_and_embedded_files_become_what_the_model_reads(tmp_path, repo, replay_file):
    model = replay_file("Seen.")
    client = RecordingClient()

    async def scenario() -> str:
        async with ribbit_acp(client, f"replay:{model}", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            await conn.prompt(session_id=session.session_id, prompt=[
                text_block("explain"),
                resource_link_block("calc.py", (repo / "calc.py").as_uri()),
                resource_block(embedded_text_resource((repo / "test_calc.py").as_uri() + "#L4:5", "def test_add():\n    ...\n")),
            ])
            return session.session_id

    session_id = run(scenario())
    prompt = next(m.content for m in SessionStore(repo).load(session_id).messages if m.role == "user")
    assert prompt.startswith("explain")
    assert '<file path="calc.py">\n     1\tdef add(a, b):\n     2\t    return a - b\n</file>' in prompt
    assert '<selection path="test_calc.py (from line 4)">\ndef test_add():\n    ...\n</selection>' in prompt


def test_outside_git_the_first_prompt_asks_for_the_folder(tmp_path, replay_file):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("keep\n")
    model = replay_file(xml_call("Write", file_path="new.txt", content="x\n"), "Done.")
    client = RecordingClient(answers=[allow("reject_once"), allow(), allow()])

    async def scenario() -> tuple[str, bool, str]:
        async with ribbit_acp(client, f"replay:{model}", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(plain))
            refused = (await conn.prompt(session_id=session.session_id, prompt=[text_block("write")])).stop_reason
            untouched = not (plain / "new.txt").exists()
            agreed = (await conn.prompt(session_id=session.session_id, prompt=[text_block("write")])).stop_reason
            return refused, untouched, agreed

    refused, untouched, agreed = run(scenario())
    assert (refused, untouched, agreed) == ("refusal", True, "end_turn")
    folder, again, write = client.asked
    assert folder.tool_call.title == again.tool_call.title == f"Work in {plain}?"
    assert write.tool_call.kind == "edit"
    assert (plain / "new.txt").read_text() == "x\n"


def test_the_users_own_commands_are_offered_and_run(tmp_path, repo, replay_file):
    folder = repo / ".ribbit" / "commands"
    folder.mkdir(parents=True)
    (folder / "explain.md").write_text("---\ndescription: explain a file\nmode: plan\n---\nExplain $1 in two sentences.\n")
    model = replay_file("It adds.")
    client = RecordingClient()

    async def scenario() -> str:
        async with ribbit_acp(client, f"replay:{model}", stderr=tmp_path / "err") as (conn, _):
            session = await conn.new_session(cwd=str(repo))
            commands = await client.wait_for(lambda: client.of_kind("available_commands_update"))
            offered = {c.name: c.description for c in commands[0].available_commands}
            assert offered["explain"] == "explain a file" and "undo" in offered
            await conn.prompt(session_id=session.session_id, prompt=[text_block("/explain calc.py")])
            return session.session_id

    session_id = run(scenario())
    prompt = next(m.content for m in SessionStore(repo).load(session_id).messages if m.role == "user")
    assert prompt.startswith("Explain calc.py in two sentences.")
    assert [u.current_mode_id for u in client.of_kind("current_mode_update")] == ["plan"]
