"""The runner end to end on real git repos, the real sandbox and replay models."""

from __future__ import annotations

import io
import json
import statistics
import subprocess
from pathlib import Path

import pytest

from agent.evaluation.report import JobResult, model_key
from agent.evaluation.runner import EvalConfig, EvalProgress, EvalRun, default_loader
from app.eval_cmd import EvalProgressDisplay, eta_seconds
from agent.evaluation.tasks import load_tasks
from agent.core.loop import Limits
from tests.conftest import xml_call
from tests.eval.conftest import CALC_FIXED
from tests.eval.oracle import oracle_models, write_replay

STARTER = Path(__file__).resolve().parents[2] / "evals" / "starter"


def run_eval(tasks: Path, models: list[str], out: Path, **config: object) -> tuple[list[JobResult], list[EvalProgress]]:
    seen: list[EvalProgress] = []
    run = EvalRun(load_tasks(tasks), models, EvalConfig(out=out, **config), progress=seen.append)  # type: ignore[arg-type]
    outcome = run.run()
    assert not outcome.interrupted
    return outcome.results, seen


@pytest.mark.slow  # every starter task graded by its real tests: ~10 s, the quick tier's largest
def test_oracle_resolves_every_starter_task(tmp_path: Path) -> None:
    """The shipped starter set is sound: each task's known fix resolves it (and so 100 %)."""
    spec = oracle_models(STARTER, tmp_path / "oracle")
    results, _ = run_eval(STARTER, [spec], tmp_path / "out", jobs=2)
    assert len(results) >= 10
    assert {r.task_id: r.outcome for r in results} == {r.task_id: "resolved" for r in results}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["models"][0]["resolved_rate"] == 1.0
    (predictions_file,) = (tmp_path / "out" / "predictions").iterdir()
    predictions = [json.loads(line) for line in predictions_file.read_text().splitlines()]
    assert len(predictions) == len(results)
    assert set(predictions[0]) == {"instance_id", "model_name_or_path", "model_patch"}
    assert all(p["model_patch"].startswith("diff --git") for p in predictions)
    # Hidden tests never reach the agent's patch.
    assert all("hidden" not in p["model_patch"] and "_hidden" not in p["model_patch"] for p in predictions)


def test_model_that_does_nothing_resolves_none(tmp_path: Path, task_set: Path) -> None:
    idle = write_replay(tmp_path / "idle.jsonl", [])
    results, _ = run_eval(task_set, [f"replay:{idle}"], tmp_path / "out")
    assert [r.outcome for r in results] == ["no_patch", "no_patch"]
    assert "0/2 (0.0%)" in (tmp_path / "out" / "report.md").read_text()


def test_patch_that_breaks_a_passing_test_is_not_resolved(tmp_path: Path, task_set: Path) -> None:
    broken = CALC_FIXED.replace("return a * b", "return a + b")  # add fixed, mul broken
    turns = [xml_call("Read", file_path="calc.py"), xml_call("Write", file_path="calc.py", content=broken)]
    model = f"replay:{write_replay(tmp_path / 'breaker.jsonl', turns)}"
    results, _ = run_eval(task_set, [model], tmp_path / "out")
    first = results[0]
    assert first.outcome == "tests_fail"
    assert first.fail_to_pass == {"tests.test_add.AddTest.test_add": "passed"}
    assert first.pass_to_pass == {"tests.test_mul.MulTest.test_mul": "failed"}
    assert "pass-to-pass" in first.message


def test_several_models_in_one_run_and_a_step_limit(tmp_path: Path, task_set: Path) -> None:
    oracle = oracle_models(task_set, tmp_path / "oracle")
    idle = f"replay:{write_replay(tmp_path / 'idle.jsonl', [])}"
    results, _ = run_eval(task_set, [oracle, idle], tmp_path / "out", jobs=2)
    by = {(r.task_id, r.model): r.outcome for r in results}
    assert by == {("calc-one", oracle): "resolved", ("calc-two", oracle): "resolved",
                  ("calc-one", idle): "no_patch", ("calc-two", idle): "no_patch"}
    # One step is not enough for Read + Write: the run stops at the limit, with nothing written.
    limited, _ = run_eval(task_set, [oracle], tmp_path / "out-limited", limits=Limits(max_steps=1))
    assert [r.outcome for r in limited] == ["limit", "limit"]
    assert limited[0].stop_reason == "max_steps"


def test_interrupted_run_resumes_without_redoing_finished_tasks(tmp_path: Path, task_set: Path) -> None:
    spec = oracle_models(task_set, tmp_path / "oracle")
    tasks = load_tasks(task_set)
    out = tmp_path / "out"
    events: list[EvalProgress] = []

    def stop_during_second_task(p: EvalProgress) -> None:
        events.append(p)
        if p.task_id == "calc-two" and p.kind == "step":
            run.stop()

    run = EvalRun(tasks, [spec], EvalConfig(out=out, jobs=1), progress=stop_during_second_task)
    first = run.run()
    assert first.interrupted
    assert [r.task_id for r in first.results] == ["calc-one"]
    saved = sorted(p.name for p in (out / "results").rglob("*.json"))
    assert saved == ["calc-one.json"]
    saved_text = next((out / "results").rglob("calc-one.json")).read_text()

    again: list[EvalProgress] = []
    second = EvalRun(tasks, [spec], EvalConfig(out=out, jobs=1), progress=again.append).run()
    assert not second.interrupted
    assert [(p.kind, p.task_id) for p in again if p.kind in ("skip", "start")] == [("skip", "calc-one"), ("start", "calc-two")]
    assert second.ran == 1
    assert [r.outcome for r in second.results] == ["resolved", "resolved"]
    assert next((out / "results").rglob("calc-one.json")).read_text() == saved_text


def test_swebench_instance_from_a_local_repository(tmp_path: Path) -> None:
    """SWE-bench JSONL: base commit, test_patch, FAIL_TO_PASS as a JSON string; later history hidden."""
    repos = tmp_path / "repos"
    src = repos / "acme__calc"
    src.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(src), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "T")
    (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (src / "test_calc.py").write_text("from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    base = git("rev-parse", "HEAD").strip()
    (src / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git("commit", "-q", "-am", "the fix, which the agent must not see")
    (src / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    test_patch = git("diff")
    git("checkout", "--", "test_calc.py")
    instance = {
        "instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": base,
        "problem_statement": "add subtracts", "test_patch": test_patch, "patch": "",
        "FAIL_TO_PASS": json.dumps(["test_calc.py::test_add"]), "PASS_TO_PASS": json.dumps(["test_calc.py::test_zero"]),
    }
    tasks_file = tmp_path / "instances.jsonl"
    tasks_file.write_text(json.dumps(instance) + "\n")
    turns = [
        xml_call("Bash", command="git log --all --format=%s > commits.txt"),
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
    ]
    model = f"replay:{write_replay(tmp_path / 'fix.jsonl', turns)}"
    tasks = load_tasks(tasks_file, repos_dir=repos)
    assert tasks[0].test_commands == ["python -m pytest -rA -p no:cacheprovider test_calc.py"]
    # The same command, minus the plugins installed here (they only slow pytest down).
    command = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -rA -p no:cacheprovider {test_files}"
    tasks = load_tasks(tasks_file, repos_dir=repos, test_command=command)
    run = EvalRun(tasks, [model], EvalConfig(out=tmp_path / "out"))
    (result,) = run.run().results
    assert result.outcome == "resolved", result.message
    assert result.fail_to_pass == {"test_calc.py::test_add": "passed"}
    # git works in the agent's sandbox, and its worktree shows no history after the base commit.
    seen = result.patch.split("commits.txt")[-1]
    assert "+base\n" in seen
    assert "the fix" not in seen


def test_patch_that_does_not_apply(tmp_path: Path, task_set: Path) -> None:
    (task, _) = load_tasks(task_set)
    run = EvalRun([task], ["m"], EvalConfig(out=tmp_path / "out"))
    stale = (
        "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n"
        "-    return a * a\n+    return a + b\n \n \n def mul(a, b):\n"
    )
    result = run.score_patch(task, "m", stale)
    assert result.outcome == "patch_does_not_apply"
    assert "calc.py" in result.message
    good = stale.replace("a * a", "a - b")
    assert run.score_patch(task, "m", good).outcome == "resolved"


def test_changed_task_repository_is_rebuilt_not_reused(tmp_path: Path, task_set: Path) -> None:
    (task, _) = load_tasks(task_set)
    run = EvalRun([task], ["m"], EvalConfig(out=tmp_path / "out"))
    note = "diff --git a/NOTES b/NOTES\n--- a/NOTES\n+++ b/NOTES\n@@ -1 +1 @@\n-fixed\n+fixed upstream\n"
    first = run.score_patch(task, "m", note)  # builds the cache; there is no NOTES file yet
    assert first is not None and first.outcome == "patch_does_not_apply"
    # The task's repository changes: the bug is fixed there, and NOTES appears.
    (task.repo / "calc.py").write_text(CALC_FIXED)
    (task.repo / "NOTES").write_text("fixed\n")
    second = run.score_patch(task, "m", note)
    assert second is not None and second.outcome == "resolved", second.message


def test_task_from_a_git_bundle(tmp_path: Path, task_set: Path) -> None:
    src = tmp_path / "src"
    subprocess.run(["cp", "-r", str(task_set / "calc-one" / "repo"), str(src)], check=True)
    env_git = ["git", "-C", str(src), "-c", "user.email=t@example.com", "-c", "user.name=T"]
    subprocess.run([*env_git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*env_git, "add", "-A"], check=True)
    subprocess.run([*env_git, "commit", "-q", "-m", "base"], check=True)
    bundle = tmp_path / "calc.bundle"
    subprocess.run([*env_git, "bundle", "create", "-q", str(bundle), "HEAD", "main"], check=True, capture_output=True)
    record = json.loads((task_set / "calc-one" / "task.json").read_text())
    record.update(id="from-bundle", repo=str(bundle), hidden_tests=str(task_set / "calc-one" / "hidden"))
    (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n")
    (task,) = load_tasks(tmp_path / "t.jsonl")
    fix = (
        "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n"
    )
    result = EvalRun([task], ["m"], EvalConfig(out=tmp_path / "out")).score_patch(task, "m", fix)
    assert result is not None and result.outcome == "resolved", result.message


def test_samples_run_each_task_n_times_with_their_own_seeds(tmp_path: Path, task_set: Path) -> None:
    """--samples 3: a model that resolves in samples 1 and 3 and does nothing in sample 2 (its seed
    decides): pass@1 2/3 with its spread, one predictions file per sample, and a resumed run redoes nothing."""
    oracle = oracle_models(task_set, tmp_path / "oracle")
    idle = f"replay:{write_replay(tmp_path / 'idle.jsonl', [])}"
    seeds: list[int | None] = []

    def loader(spec: str, limits: Limits, seed: int | None) -> object:
        seeds.append(seed)
        return default_loader(idle if seed == 1 else spec, limits, seed)

    out = tmp_path / "out"
    config = EvalConfig(out=out, jobs=2, samples=3)
    outcome = EvalRun(load_tasks(task_set), [oracle], config, loader=loader).run()  # type: ignore[arg-type]
    assert sorted(seeds, key=str) == sorted([None, None, 1, 1, 2, 2], key=str)
    assert [(r.task_id, r.sample, r.outcome) for r in outcome.results] == [
        ("calc-one", 1, "resolved"), ("calc-one", 2, "no_patch"), ("calc-one", 3, "resolved"),
        ("calc-two", 1, "resolved"), ("calc-two", 2, "no_patch"), ("calc-two", 3, "resolved"),
    ]
    key = model_key(oracle)
    assert sorted(p.name for p in (out / "results" / key).iterdir()) == [
        "calc-one.json", "calc-one@2.json", "calc-one@3.json", "calc-two.json", "calc-two@2.json", "calc-two@3.json"]
    assert sorted(p.name for p in (out / "transcripts" / key).iterdir())[:3] == [
        "calc-one.jsonl", "calc-one@2.jsonl", "calc-one@3.jsonl"]
    assert sorted(p.name for p in (out / "predictions").iterdir()) == [f"{key}.jsonl", f"{key}@2.jsonl", f"{key}@3.jsonl"]
    (summary,) = json.loads((out / "report.json").read_text())["models"]
    assert summary["sample_rates"] == [1.0, 0.0, 1.0]
    assert summary["resolved_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert summary["pass_at_1_sd"] == pytest.approx(statistics.stdev([1.0, 0.0, 1.0]), abs=1e-4)
    md = (out / "report.md").read_text()
    assert "| 66.7% ± 57.7% (samples 0%–100%; 4/6 runs) |" in md
    assert "| calc-one | 2/3 resolved |" in md
    again = EvalRun(load_tasks(task_set), [oracle], config, loader=loader).run()  # type: ignore[arg-type]
    assert again.ran == 0 and len(again.results) == 6


def test_progress_shows_done_resolved_so_far_and_eta() -> None:
    stream = io.StringIO()
    now = [100.0]
    display = EvalProgressDisplay(stream, ["replay:a/frog.jsonl", "openai:http://h/v1#gemma"], parallel=2,
                                  clock=lambda: now[0])
    for index, (task, model, outcome, wall) in enumerate([
        ("t1", "replay:a/frog.jsonl", "resolved", 40.0), ("t1", "openai:http://h/v1#gemma", "tests_fail", 20.0),
    ], start=1):
        now[0] += 30.0
        result = JobResult(task_id=task, model=model, outcome=outcome, wall_s=wall)  # type: ignore[arg-type]
        display(EvalProgress("done", task, model, index, 8, result=result))
    last = stream.getvalue().splitlines()[-1]
    # 2 jobs in the run's first 60 s, 6 left: 180 s at that pace (the jobs' own 40 s and 20 s do not enter).
    assert last.endswith("· 2/8 done, resolved so far: replay:a/frog.jsonl 1/1, gemma 0/1, ETA 3m00s")
    assert eta_seconds(6, 3, 120.0) == pytest.approx(240.0)
    assert eta_seconds(5, 0, 10.0) is None and eta_seconds(0, 4, 10.0) == 0.0


def test_eta_counts_kept_jobs_as_done_but_not_in_the_pace() -> None:
    """A resumed run: the jobs kept from before are done, but took no time in this run."""
    stream = io.StringIO()
    now = [0.0]
    display = EvalProgressDisplay(stream, ["replay:a.jsonl"], clock=lambda: now[0])
    kept = JobResult(task_id="t1", model="replay:a.jsonl", outcome="resolved", wall_s=5.0)
    display(EvalProgress("skip", "t1", "replay:a.jsonl", 1, 4, result=kept))
    now[0] = 50.0
    done = JobResult(task_id="t2", model="replay:a.jsonl", outcome="resolved", wall_s=50.0)
    display(EvalProgress("done", "t2", "replay:a.jsonl", 2, 4, result=done))
    assert stream.getvalue().splitlines()[-1].endswith("ETA 1m40s")  # 2 left at 50 s each


def test_first_n_tasks_from_the_command_line(tmp_path: Path, task_set: Path) -> None:
    """`ribbit eval --first 1` runs only the first task of the set (issue 32): one job, on disk."""
    import sys

    idle = write_replay(tmp_path / "idle.jsonl", [])
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "eval", str(task_set), "--model", f"replay:{idle}", "--out", str(out),
         "--first", "1"], capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert "0/1 (0.0%)" in (out / "report.md").read_text()
