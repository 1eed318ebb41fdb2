"""Predictions files as the official SWE-bench harness reads them (swebench 5.0.2).

Importing swebench is not cheap (its harness imports docker, datasets and modal at module level), so
this test reads the files with the same rules, line for line, as the harness code it names:
- harness/utils.py get_predictions_from_file: a .jsonl is `[json.loads(line) for line in f]`; each item
  must be a dict with "instance_id";
- harness/run_evaluation.py main: `{pred["instance_id"]: pred for pred in predictions}` — one patch per
  instance per file, so one file per model;
- get_dataset_from_preds / reporting: `model_patch` "" or None means an empty patch; the log folder is
  `prediction["model_name_or_path"].replace("/", "__")`;
- run_instance: writes `pred["model_patch"] or ""` to patch.diff and tries `git apply --verbose` first.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agent.evaluation.repos import prepare_cache
from agent.evaluation.runner import EvalConfig, EvalRun
from agent.evaluation.tasks import load_tasks
from tests.eval.oracle import oracle_models, write_replay


def read_like_swebench(path: Path) -> list[dict]:
    with open(path) as f:
        predictions = [json.loads(line) for line in f]
    for pred in predictions:
        if not isinstance(pred, dict):
            raise ValueError(f"Each prediction must be a dictionary, got {type(pred)}")
        if "instance_id" not in pred:
            raise ValueError("Each prediction must contain 'instance_id'")
    return predictions


def test_one_predictions_file_per_model_in_the_harness_format(tmp_path: Path, task_set: Path) -> None:
    oracle = oracle_models(task_set, tmp_path / "oracle")
    idle = f"replay:{write_replay(tmp_path / 'idle.jsonl', [])}"
    out = tmp_path / "out"
    tasks = load_tasks(task_set)
    EvalRun(tasks, [oracle, idle], EvalConfig(out=out, jobs=2)).run()
    files = sorted((out / "predictions").iterdir())
    assert len(files) == 2 and not (out / "predictions.jsonl").exists()
    names = set()
    for path in files:
        predictions = read_like_swebench(path)
        keyed = {pred["instance_id"]: pred for pred in predictions}
        assert len(keyed) == len(predictions) == len(tasks)  # nothing lost to the keying
        assert set(keyed) == {t.id for t in tasks}
        for pred in predictions:
            assert set(pred) == {"instance_id", "model_name_or_path", "model_patch"}
            assert isinstance(pred["model_name_or_path"], str) and isinstance(pred["model_patch"], str)
        (name,) = {pred["model_name_or_path"] for pred in predictions}
        assert path.name == f"{name}.jsonl" and "/" not in name.replace("/", "__")
        names.add(name)
        for task in tasks:
            patch = keyed[task.id]["model_patch"] or ""
            if not patch:
                continue  # the harness counts an empty patch as unresolved without running it
            cache, base = prepare_cache(task, out / "repos")
            checkout = tmp_path / "apply" / name / task.id
            subprocess.run(["git", "clone", "-q", str(cache), str(checkout)], check=True)
            subprocess.run(["git", "checkout", "-q", base], cwd=checkout, check=True)
            (checkout / "patch.diff").write_text(patch)
            applied = subprocess.run(["git", "apply", "--verbose", "patch.diff"], cwd=checkout, capture_output=True, text=True)
            assert applied.returncode == 0, applied.stderr
    assert len(names) == 2  # distinct log folders in one harness run
    by_model = {path.name: {p["instance_id"]: p["model_patch"] for p in read_like_swebench(path)} for path in files}
    patches = [p for preds in by_model.values() for p in preds.values()]
    assert sorted(bool(p) for p in patches) == [False, False, True, True]  # the oracle's two, idle's two empty
