"""Task files: the accepted forms, and one-line errors (no tracebacks) for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.evaluation.tasks import TaskFileError, load_tasks, select
from app.cli import main
from app.eval_cmd import default_jobs, eval_main
from tests.eval.conftest import make_task

STARTER = Path(__file__).resolve().parents[2] / "evals" / "starter"


def test_starter_set_loads_with_hidden_tests_apart() -> None:
    tasks = load_tasks(STARTER)
    assert len(tasks) >= 10
    for task in tasks:
        assert task.fail_to_pass and task.pass_to_pass
        assert task.hidden_tests is not None and task.hidden_tests.is_dir()
        assert task.repo.is_dir() and not (task.repo / "hidden").exists()
        # No hidden test file is also in the repository the agent sees.
        hidden = {p.relative_to(task.hidden_tests) for p in task.hidden_tests.rglob("*.py")}
        assert hidden and not any((task.repo / rel).exists() for rel in hidden)


def test_single_folder_and_jsonl_forms(tmp_path: Path) -> None:
    folder = make_task(tmp_path, "calc")
    (only,) = load_tasks(folder)
    assert only.id == "calc" and only.repo == (folder / "repo").resolve()
    lines = tmp_path / "tasks.jsonl"
    record = {"id": "j1", "repo": "calc/repo", "problem_statement": "fix it", "test_commands": ["true"]}
    lines.write_text(json.dumps(record) + "\n\n" + json.dumps({**record, "id": "j2"}) + "\n")
    assert [t.id for t in load_tasks(lines)] == ["j1", "j2"]
    assert [t.id for t in select(load_tasks(lines), ["j2"])] == ["j2"]
    with pytest.raises(TaskFileError, match="no task named nope"):
        select(load_tasks(lines), ["nope"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"test_commands": ["true"]}', "problem_statement: Field required"),
        ('{"problem_statement": "x", "test_commands": ["true"], "colour": 1}', "colour: Extra inputs are not permitted"),
        ('{"problem_statement": "x", "test_commands": []}', "test_commands"),
        ('{"problem_statement": "x", "test_commands": ["true"], "repo": "elsewhere"}', "does not exist"),
    ],
)
def test_bad_task_file_is_one_line_error(tmp_path: Path, content: str, message: str) -> None:
    folder = make_task(tmp_path, "bad")
    (folder / "task.json").write_text(content)
    with pytest.raises(TaskFileError, match=message) as caught:
        load_tasks(folder)
    assert "\n" not in str(caught.value)
    assert "task.json" in str(caught.value)


def test_duplicate_ids_and_missing_swebench_repo(tmp_path: Path) -> None:
    make_task(tmp_path, "calc")
    record = {"id": "same", "repo": "calc/repo", "problem_statement": "p", "test_commands": ["true"]}
    dup = tmp_path / "dup.jsonl"
    dup.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(TaskFileError, match="appears twice"):
        load_tasks(dup)
    swe = tmp_path / "swe.jsonl"
    swe.write_text(json.dumps({"instance_id": "a__b-1", "repo": "a/b", "base_commit": "abc", "problem_statement": "p"}) + "\n")
    with pytest.raises(TaskFileError, match="a/b is not available locally"):
        load_tasks(swe, repos_dir=tmp_path)


def test_cli_reports_bad_tasks_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = make_task(tmp_path, "bad")
    (folder / "task.json").write_text("[1, 2")
    assert eval_main([str(folder), "--model", "default", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ribbit eval: error: ") and "Traceback" not in err and err.count("\n") == 1
    assert main(["eval", str(folder)]) == 2  # --model is required
    assert "--model" in capsys.readouterr().err


def test_default_jobs() -> None:
    assert default_jobs(["default"]) == 1
    assert default_jobs(["/m/frognano.gguf", "openai:http://localhost:8080"]) == 1
    assert default_jobs(["openai:http://a", "replay:x.jsonl"]) >= 1
