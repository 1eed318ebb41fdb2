"""A real llama.cpp turn (the embedded SmolLM2 GGUF, loaded in-process) streamed through `ribbit acp`, on raw
pipes: every byte on stdout is a JSON-RPC line, whatever llama.cpp logs while it loads and runs."""

from __future__ import annotations

import json

import pytest

from tests.acp.test_acp_bad_input import RawAgent

pytestmark = pytest.mark.real_model


def test_a_real_turn_streams_through_acp(repo):
    agent = RawAgent("default")
    agent.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
    assert agent.reply(1)["result"]["agentInfo"]["name"] == "ribbit"
    agent.send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(repo), "mcpServers": []}})
    session_id = agent.reply(2)["result"]["sessionId"]
    agent.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {
        "sessionId": session_id, "prompt": [{"type": "text", "text": "In one sentence: what does calc.py do?"}]}})
    assert agent.process.stdout is not None
    chunks: list[str] = []
    usage = None
    reply = None
    while reply is None:
        message = json.loads(agent.process.stdout.readline())
        assert message["jsonrpc"] == "2.0"
        if message.get("id") == 3:
            reply = message
            continue
        update = message.get("params", {}).get("update", {})
        if update.get("sessionUpdate") in ("agent_message_chunk", "agent_thought_chunk"):
            chunks.append(update["content"]["text"])
        if update.get("sessionUpdate") == "usage_update" and usage is None:
            usage = update
            # One whole model turn is what this test is about: stop the task there.
            agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
    assert reply["result"]["stopReason"] in ("end_turn", "cancelled")
    assert "".join(chunks).strip()
    assert usage is not None and 100 < usage["used"] <= usage["size"]
    code, out, err = agent.finish()
    assert code == 0
    for raw in out.splitlines():
        assert json.loads(raw)["jsonrpc"] == "2.0"
    assert b"Traceback" not in err
