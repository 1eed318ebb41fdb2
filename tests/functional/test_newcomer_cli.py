"""Issue 40's command-line items: eval checks every SPEC before a job runs and names a demo candidate,
`ribbit --mode review` is refused by the parser with the app's own sentence, `ribbit doctor` says where a
model that edits comes from, the demo is told a request names a file, counts read as words, an over-long
task is refused before the model sees it. Outcomes in exit codes, on disk and in what the model got."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.args import TUI_NO_REVIEW
from app.cli import main
from app.eval_cmd import check_specs, demo_note, missing_programs
from app.words import counted
from models.embedded import EMBEDDED_NAME, demo_file_note, named_files
from models.replay import ReplayModel
from tests.conftest import xml_call
from tests.functional.helpers import ribbit_run

STARTER = Path(__file__).resolve().parents[2] / "evals" / "starter"


def test_eval_refuses_a_missing_replay_before_any_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "nothing"}) + "\n")
    code = main(["eval", str(STARTER), "--model", f"replay:{good}", "--model", f"replay:{tmp_path}/none/{{task}}.jsonl",
                 "--out", str(out), "--no-sandbox"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert err.startswith("ribbit eval: error: --model replay:") and "does not exist" in err and "(and 11 more" in err
    assert not out.exists()  # nothing ran, nothing was written


def test_check_specs_substitutes_each_task_and_reads_each_gguf(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    (tmp_path / "fake.gguf").write_bytes(b"NOPE" + b"\0" * 64)
    assert check_specs([f"replay:{tmp_path}/{{task}}.jsonl"], ["a"]) is None
    missing = check_specs([f"replay:{tmp_path}/{{task}}.jsonl"], ["a", "b"])
    assert missing is not None and "b.jsonl" in missing and "more" not in missing
    assert "fake.gguf" in (check_specs([str(tmp_path / "fake.gguf")], ["a"]) or "")


def test_eval_refuses_test_commands_whose_program_is_not_on_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh Debian has `python3` and no `python`: the starter set's tests would all "not run"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "git", "sh"):
        (bin_dir / name).symlink_to(f"/usr/bin/{name}")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert missing_programs(["true", "cd x && true", "git status"]) is None
    line = missing_programs(["PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -rA tests", "python -m unittest"])
    assert line is not None and "`python`" in line and "is not on PATH" in line
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "nothing"}) + "\n")
    out = tmp_path / "out"
    code = main(["eval", str(STARTER), "--model", f"replay:{good}", "--out", str(out), "--no-sandbox"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "`python`" in err and "nothing was run" in err and not out.exists()


def test_eval_names_the_demo_model_as_one() -> None:
    note = demo_note(["default", "replay:x.jsonl"])
    assert note is not None and EMBEDDED_NAME in note and "default" in note and "does not use the tools" in note
    assert demo_note(["replay:x.jsonl", "openai:http://h/v1#m"]) is None


def test_the_tui_parser_refuses_review_mode_with_the_apps_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mode", "review"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(TUI_NO_REVIEW) and "--mode" in err
    assert main(["--mode", "sideways"]) == 2
    assert "'sideways' is not a mode" in capsys.readouterr().err


def test_doctor_names_where_models_that_edit_come_from(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       repo: Path) -> None:
    main(["doctor", "--repo", str(repo)])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "models that edit" in x]
    assert "FrogNano-4B-2609" in line and "9.32 GB" in line and "names no download address" in line
    assert "Qwen2.5" in line and "Hermes" in line and "tried here" in line
    assert "http" not in line.split("openai:")[0]  # no invented address


def test_a_request_to_the_demo_naming_a_file_is_told_it_was_not_opened(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.run as run_module

    path = tmp_path / "demo.jsonl"
    path.write_text(json.dumps({"text": "calc.py is a Bash script."}) + "\n")
    model = ReplayModel(path)
    model.info = model.info.model_copy(update={"path": f"/cache/{EMBEDDED_NAME}.Q8_0.abc.gguf"})
    monkeypatch.setattr(run_module, "load_model", lambda spec, context, engine: model)
    result = ribbit_run(capsys, tmp_path, repo, "default", task="why does test_calc.py fail in calc.py?")
    notes = [x for x in result.stderr.splitlines() if x.startswith("ribbit: note:")]
    assert result.code == 0 and any("answers from your message alone" in n for n in notes)
    assert any("does not open test_calc.py or calc.py" in n for n in notes)


@pytest.mark.parametrize("text, names", [
    ("the test in tests/test_dates.py fails, fix it", ["tests/test_dates.py"]),
    ("what does calc.py do? see README.md and calc.py", ["calc.py", "README.md"]),
    ("e.g. version 3.5 of the U.S. plan", []),
    ("fix the Makefile", ["Makefile"]),
    ("write to me@example.com", []),
])
def test_named_files(text: str, names: list[str]) -> None:
    assert named_files(text) == names
    assert (demo_file_note(text) is None) == (not names)


def test_counts_read_as_words(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert [counted(0, "step"), counted(1, "step"), counted(2, "step")] == ["0 steps", "1 step", "2 steps"]
    replay = tmp_path / "r.jsonl"
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in [
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"), "Fixed."]))
    result = ribbit_run(capsys, tmp_path, repo, replay, "--mode", "auto-edit")
    assert "ribbit: finished after 3 steps; files changed: 1" in result.stderr
    assert main(["undo", "--list", "--repo", str(repo)]) == 0
    listed = capsys.readouterr().out
    assert "1 step changed files" in listed and "calc.py" in listed and "step(s)" not in listed


def test_an_over_long_task_is_refused_before_the_model_sees_it(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": xml_call("Write", file_path="x.txt", content="x")}) + "\n")
    task = "please look at this log:\n" + "a line of a very long log\n" * 2000
    result = ribbit_run(capsys, tmp_path, repo, replay, "--context", "4096", "--mode", "full-auto", "--no-sandbox",
                        task=task)
    assert result.code == 1 and "not sent" in result.stderr and "\n" not in result.stderr.strip().splitlines()[-1]
    assert not (repo / "x.txt").exists() and result.patch == ""
