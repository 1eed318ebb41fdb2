"""bench.session's recorded task names no machine's paths: its commands are written as a user types them
(`python -m pytest`), and the replay runs them on the interpreter it runs on, as an activated virtual
environment would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from bench.record_session import this_python_first
from bench.session import SESSION, load_session, render_steps

CALL = re.compile(r"<function=Bash>\s*<parameter=command>\n(.*?)\n</parameter>", re.S)


def recorded_commands() -> tuple[list[str], list[str]]:
    """The Bash commands as the model wrote them (raw turns) and as the transcript kept them (tool calls)."""
    header, messages = load_session(SESSION)
    written = [command for text in header["assistant_raw"] for command in CALL.findall(text)]
    kept = [json.loads(call["function"]["arguments"])["command"]
            for m in messages if m["role"] == "assistant" for call in m.get("tool_calls") or []
            if call["function"]["name"] == "Bash"]
    return written, kept


def test_recorded_commands_name_no_absolute_path() -> None:
    written, kept = recorded_commands()
    assert written == kept and len(written) == 10  # every Bash step of the session, in both records
    commands = written
    assert [c for c in commands if re.search(r"(^|[\s'\"=])/", c)] == []
    assert any(c.startswith("python -m pytest ") for c in commands)


def test_the_session_still_renders() -> None:
    header, messages = load_session(SESSION)
    head, steps = render_steps(header, messages)
    assert header["task"] in head
    assert len(steps) == len(header["assistant_raw"]) == 20
    assert "<tool_response>" in steps[0][1]


def test_python_in_a_replayed_command_is_this_interpreter() -> None:
    found = subprocess.run(["sh", "-c", "command -v python"], env=this_python_first(), capture_output=True, text=True, check=True)
    assert os.path.samefile(found.stdout.strip(), Path(sys.executable).parent / "python")
