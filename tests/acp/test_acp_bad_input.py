"""Bad input to `ribbit acp`: each gets a protocol error (or a clean stop), stdout stays JSON-RPC only, no
traceback, no orphan process, the journal intact."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from acp import text_block

from agent.session import SessionStore
from tests.acp.helpers import ROOT, RecordingClient, agent_env, ribbit_acp, run
from tests.conftest import xml_call


class RawAgent:
    """`ribbit acp` on raw pipes: lines in, every line out parsed (which fails on anything but JSON)."""

    def __init__(self, model: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "acp", "--model", model],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=agent_env(),
        )

    def send(self, line: str | dict) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((line if isinstance(line, str) else json.dumps(line)).encode() + b"\n")
        self.process.stdin.flush()

    def reply(self, request_id: object) -> dict:
        """The next message answering `request_id` (notifications on the way are checked and skipped)."""
        assert self.process.stdout is not None
        while True:
            raw = self.process.stdout.readline()
            assert raw, "the agent closed its output"
            message = json.loads(raw)
            assert message["jsonrpc"] == "2.0"
            if "id" in message and message["id"] == request_id and "method" not in message:
                return message

    def finish(self) -> tuple[int, bytes, bytes]:
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out, err


def test_bad_messages_get_protocol_errors_and_the_agent_goes_on(repo, replay_file):
    agent = RawAgent(f"replay:{replay_file('Hello.')}")
    agent.send("{this is not json")
    assert agent.reply(None)["error"]["code"] == -32700
    agent.send("[1, 2, 3]")
    assert agent.reply(None)["error"]["code"] == -32600
    agent.send({"jsonrpc": "2.0", "id": 1, "method": "session/teleport", "params": {}})
    assert agent.reply(1)["error"]["code"] == -32601
    agent.send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"mcpServers": []}})  # no cwd
    assert agent.reply(2)["error"]["code"] == -32602
    agent.send({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": 1}})
    assert agent.reply(3)["result"]["agentCapabilities"]["loadSession"] is True
    agent.send({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                "params": {"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}})
    error = agent.reply(4)["error"]
    assert error["code"] == -32602 and "no session 'nope'" in error["message"]
    for cwd, why in (("/", "/"), ("relative/path", "absolute"), (str(repo / "missing"), "does not exist")):
        agent.send({"jsonrpc": "2.0", "id": 5, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})
        error = agent.reply(5)["error"]
        assert why in error["message"]
    agent.send({"jsonrpc": "2.0", "id": 6, "method": "session/new", "params": {"cwd": str(repo), "mcpServers": []}})
    session_id = agent.reply(6)["result"]["sessionId"]
    agent.send({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {
        "sessionId": session_id, "prompt": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}})
    assert "text only" in agent.reply(7)["error"]["message"]
    agent.send({"jsonrpc": "2.0", "id": 8, "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}})
    assert agent.reply(8)["result"]["stopReason"] == "end_turn"
    code, out, err = agent.finish()  # end of input: a clean stop
    assert code == 0
    for raw in out.splitlines():
        assert json.loads(raw)["jsonrpc"] == "2.0"
    assert b"Traceback" not in err


def test_a_client_that_disconnects_mid_turn_leaves_no_orphan_and_the_journal_whole(tmp_path, repo, replay_file):
    model = replay_file(
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        xml_call("Bash", command="sleep 3072; echo late > late.txt"),
    )
    client = RecordingClient()

    async def scenario() -> tuple[str, int]:
        async with ribbit_acp(client, f"replay:{model}", "--mode", "full-auto", stderr=tmp_path / "err") as (conn, process):
            session = await conn.new_session(cwd=str(repo))
            turn = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[text_block("go")]))
            await client.wait_for(lambda: subprocess.run(["pgrep", "-f", "sleep 3072"], capture_output=True).returncode == 0)
            process.stdin.close()  # the editor went away
            code = await asyncio.wait_for(process.wait(), 60)
            turn.cancel()
            return session.session_id, code

    session_id, code = run(scenario())
    assert code == 0
    assert subprocess.run(["pgrep", "-f", "sleep 3072"], capture_output=True).returncode == 1
    assert not (repo / "late.txt").exists()
    assert "a + b" in (repo / "calc.py").read_text()
    # The journal is whole: the session's undo goes back to the start.
    undo = subprocess.run([sys.executable, "-m", "app.cli", "undo", session_id], cwd=repo, env=agent_env(),
                          capture_output=True, text=True, timeout=120)
    assert undo.returncode == 0, undo.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert SessionStore(repo).load(session_id).tasks[0].prompt == "go"
    assert "Traceback" not in (tmp_path / "err").read_text()


def test_sigterm_is_a_clean_stop(repo, replay_file):
    agent = RawAgent(f"replay:{replay_file('Hello.')}")
    agent.send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(repo), "mcpServers": []}})
    session_id = agent.reply(1)["result"]["sessionId"]
    agent.process.terminate()
    code, _out, err = agent.finish()
    assert code == 0 and b"Traceback" not in err
    assert SessionStore(repo).load(session_id).session_id == session_id
