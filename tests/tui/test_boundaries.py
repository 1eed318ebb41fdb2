"""Separation (harlequin style): the TUI never imports llama_cpp; the import contracts (pyproject) hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent.core.events import ReasoningDelta, TextDelta, ToolCallEvent
from app.bridge import EventBridge, coalesce
from app.messages import EventsReady
from models.chat import ToolCall

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(imports: str) -> set[str]:
    code = f"import sys\n{imports}\nprint(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_tui_does_not_import_llama_cpp() -> None:
    modules = loaded_after("import app.app, app.tui_main, app.screens.review, app.screens.bash")
    assert "textual" in modules
    assert "llama_cpp" not in modules


def test_import_contracts_hold() -> None:
    """pyproject's import-linter contracts: agent/models/quantize never import textual or app, models never
    import agent, quantize's run time needs no torch, the loop and the checkout layer never import evaluation."""
    out = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and " kept" in out.stdout


def test_bridge_coalesces_deltas_in_order_and_pings_once() -> None:
    posted: list[object] = []
    bridge = EventBridge(posted.append)
    call = ToolCall(id="c1", name="Read", arguments={"file_path": "x"})
    for event in (TextDelta(text="a"), TextDelta(text="b"), ReasoningDelta(text="r"), ToolCallEvent(call=call), TextDelta(text="c")):
        bridge.sink(event)
    assert len(posted) == 1 and isinstance(posted[0], EventsReady)  # one ping until the app drains
    items, deltas = bridge.drain()
    assert deltas == 4
    assert [type(i).__name__ for i in items] == ["TextDelta", "ReasoningDelta", "ToolCallEvent", "TextDelta"]
    assert items[0].text == "ab" and items[-1].text == "c"  # type: ignore[union-attr]
    bridge.sink(TextDelta(text="d"))
    assert len(posted) == 2
    assert coalesce([]) == []


def test_markdown_blocks_freeze_only_outside_code_fences() -> None:
    from app.widgets.transcript import split_blocks

    blocks, tail = split_blocks("# Title\n\npara one\nstill one\n\n```py\nx = 1\n\ny = 2\n```\n\nopen par")
    assert blocks == ["# Title", "para one\nstill one", "```py\nx = 1\n\ny = 2\n```"]
    assert tail == "open par"
    blocks, tail = split_blocks("```py\nx = 1\n\n")
    assert blocks == [] and tail.startswith("```py")
