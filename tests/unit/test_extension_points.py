"""Extension points in one place: a toy tool (tests/unit/toy_tool.py) and a toy backend
(tests/unit/toy_backend.py), each one module plus one registry entry, and nothing else changes: the
approvals, the session's snapshots, the transcript, the prompt, `--model`'s help, doctor and eval all
take them from the registries. Outcomes are checked where they happen (on disk, in the journal, in the
text a user reads). Also: RIBBIT_* variables are read by the one settings object and nowhere else."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from agent.core.tools import TOOLS
from agent.session import call_summary, open_workspace
from models.backends import BACKENDS, load_model
from models.chat import ToolCall
from models.settings import Settings
from tests.conftest import tree_bytes, xml_call
from tests.safety.helpers import Recorder, YesApprover, tool_outputs
from tests.unit.toy_backend import EchoBackend, EchoModel
from tests.unit.toy_tool import StampTool

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TOOLS, StampTool.name, StampTool)


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BACKENDS, EchoBackend.prefix, EchoBackend())


def stamp_session(repo: Path, mode: str):  # type: ignore[no-untyped-def]
    model = load_model("echo:" + xml_call("Stamp", file_path="made.txt", text="stamped\n"))
    recorder = Recorder()
    workspace = open_workspace(model, repo, mode=mode, approver=YesApprover(), sink=recorder, watch=False, no_sandbox=True)  # type: ignore[arg-type]
    return workspace, recorder


def test_a_toy_tool_is_offered_runs_and_is_undone(repo: Path, stamp: None, echo: None) -> None:
    before = tree_bytes(repo)
    workspace, recorder = stamp_session(repo, "auto-edit")
    try:
        assert "Stamp" in [spec.name for spec in workspace.session.specs]  # the model is told of it
        workspace.session.limits.max_steps = 1
        workspace.run("stamp a file")
        assert (repo / "made.txt").read_text() == "stamped\n"
        assert tool_outputs(recorder)[0] == "stamped made.txt"
        # It changes files (its trait): the step was snapshotted, so undo takes it back.
        result = workspace.undo_last()
    finally:
        workspace.close()
    assert result.deleted == ["made.txt"] and tree_bytes(repo) == before


def test_plan_mode_refuses_a_toy_tool_that_changes_files(repo: Path, stamp: None, echo: None) -> None:
    workspace, recorder = stamp_session(repo, "plan")
    try:
        workspace.session.limits.max_steps = 1
        workspace.run("stamp a file")
    finally:
        workspace.close()
    assert not (repo / "made.txt").exists()
    assert tool_outputs(recorder)[0].startswith("Error: Stamp is not available in plan mode")


def test_the_transcript_shows_a_toy_tool_as_its_class_says(stamp: None) -> None:
    from app.widgets.transcript import summarize_call

    call = ToolCall(id="1", name="Stamp", arguments={"file_path": "made.txt", "text": "hello"})
    summary = call_summary(call)
    assert summary is not None and summary.subject == "made.txt"
    assert summarize_call(call) == "made.txt (5 chars)"


def test_a_toy_backend_loads_and_shows_in_help_doctor_and_eval(echo: None) -> None:
    from agent.evaluation.report import model_key, short_label
    from app.cli import tui_parser
    from app.eval_cmd import default_jobs
    from models.diagnostics import model_checks

    model = load_model("echo:hi there")
    assert isinstance(model, EchoModel) and model.text == "hi there"
    assert "echo:TEXT" in " ".join(tui_parser().format_help().split())
    checks = {c.name: c for c in model_checks("echo:hi")}
    assert checks["model SPEC"].detail == "echo:hi: answers with its own text"
    assert checks["echo"].ok and checks["memory plan"].detail.startswith("not needed for echo")
    assert "not used by echo" in checks["drafting"].detail
    assert short_label("echo:hi") == "echo" and model_key("echo:hi").startswith("echo_hi-")
    assert default_jobs(["echo:a"]) == max(1, min(4, os.cpu_count() or 1))  # not in-process: jobs overlap


def test_without_the_registry_entry_the_spec_is_a_file_path() -> None:
    from models.base import ModelError

    with pytest.raises(ModelError, match="echo:hi"):
        load_model("echo:hi")


def test_settings_read_every_ribbit_variable() -> None:
    settings = Settings.read({
        "RIBBIT_MODEL": " replay:x.jsonl ", "RIBBIT_THREADS": "3", "RIBBIT_LLAMA_AMX": "1",
        "RIBBIT_SANDBOX_HIDE": f"/a{os.pathsep}/b", "RIBBIT_SANDBOX_EXPOSE": "/c", "RIBBIT_SANDBOX_ENV": "X, Y_*",
        "RIBBIT_SANDBOX_CGROUPS": "off",
    })
    assert settings.model == "replay:x.jsonl" and settings.threads == "3" and settings.llama_amx
    assert settings.sandbox_hide == ["/a", "/b"] and settings.sandbox_expose == ["/c"] and settings.sandbox_env == ["X", "Y_*"]
    assert not settings.sandbox_cgroups and Settings.read({}).sandbox_cgroups


def ribbit_variable_reads(path: Path) -> list[str]:
    """`environ.get("RIBBIT_X")`, `environ["RIBBIT_X"]`, `getenv("RIBBIT_X")` in a file: a variable read."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        key = node.slice if isinstance(node, ast.Subscript) else node.args[0] if isinstance(node, ast.Call) and node.args else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("RIBBIT_"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_ribbit_variables_are_read_only_by_the_settings_object() -> None:
    files = [p for package in ("agent", "app", "models", "quantize") for p in (ROOT / package).rglob("*.py")]
    assert len(files) > 100
    reads = [hit for p in files if p != ROOT / "models" / "settings.py" for hit in ribbit_variable_reads(p)]
    assert reads == []
    probe = ROOT / "models" / "settings.py"
    assert ribbit_variable_reads(probe) == []  # it reads through env_name(): the check sees literal names only
    tree = ast.parse('import os\nos.environ.get("RIBBIT_X")\nos.environ["RIBBIT_Y"]\n')
    assert len([n for n in ast.walk(tree) if isinstance(n, (ast.Call, ast.Subscript))]) >= 2  # what it looks for exists
