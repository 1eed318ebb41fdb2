"""Thread choice: physical cores, measured contention (never the load average), --threads / RIBBIT_THREADS."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import main
from models.base import ModelError
from models.memory import plan_memory
from models.threads import ContentionMeter, ThreadPolicy, physical_cores, threads_override
from tests.engine.conftest import make_model


def _topology(root: Path, cpus: dict[int, tuple[int, int]]) -> Path:
    for cpu, (package, core) in cpus.items():
        folder = root / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "physical_package_id").write_text(f"{package}\n")
        (folder / "core_id").write_text(f"{core}\n")
    return root


def test_smt_siblings_count_as_one_core(tmp_path):
    sysfs = _topology(tmp_path, {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1)})  # 2 cores x 2 threads
    assert physical_cores([0, 1, 2, 3], sysfs) == 2
    assert physical_cores([0, 2], sysfs) == 1  # affinity to one core's two threads
    assert physical_cores([0, 1], tmp_path / "missing") == 2  # unknown topology: logical count


def test_flag_beats_environment_and_bad_values_are_one_line_errors():
    assert threads_override(3, {"RIBBIT_THREADS": "5"}) == (3, "flag")
    assert threads_override(None, {"RIBBIT_THREADS": " 5 "}) == (5, "env")
    assert threads_override(None, {}) is None
    with pytest.raises(ModelError, match="RIBBIT_THREADS='two' is not a whole number"):
        threads_override(None, {"RIBBIT_THREADS": "two"})
    with pytest.raises(ModelError, match="at least 1"):
        threads_override(None, {"RIBBIT_THREADS": "0"})


def test_policy_gives_cores_up_only_to_measured_contention():
    policy = ThreadPolicy(env={}, cpus=[0, 1, 2, 3], cores=4)
    assert policy.choice.n_threads == 4 and policy.choice.source == "cores"
    assert policy.observe(1.1).n_threads == 3
    assert "other programs measured busy on 1.1" in policy.choice.reason()
    assert policy.observe(0.5).n_threads == 3  # in between: keep
    assert policy.observe(0.1).n_threads == 4  # they stopped: take the cores back
    assert policy.observe(9.0).n_threads == 1
    assert policy.observe(None).n_threads == 1  # nothing measured: nothing changes
    fixed = ThreadPolicy(flag=2, env={}, cpus=[0, 1, 2, 3], cores=4)
    assert fixed.observe(3.0).n_threads == 2 and "--threads" in fixed.choice.reason()


def test_contention_is_busy_cpu_time_of_others(tmp_path):
    stat = tmp_path / "stat"

    def write(busy: int) -> None:  # user nice system idle iowait irq softirq steal
        stat.write_text(f"cpu  {busy} 0 0 1000 5000 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\n")

    meter = ContentionMeter(stat)
    meter.tick = 100.0
    write(1000)
    meter.start()
    time.sleep(0.2)
    write(1000 + 30)  # 0.3 CPU-seconds over ~0.2 s; iowait grew a lot but is not CPU time
    others = meter.stop()
    assert others is not None and 0.9 < others < 1.6


def test_a_busy_program_is_measured(tmp_path):
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        meter = ContentionMeter()
        meter.start()
        time.sleep(0.6)
        others = meter.stop()
    finally:
        spinner.kill()
        spinner.wait()
    assert others is not None and others >= 0.6


def test_the_load_average_does_not_take_threads_away(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 6.0, 6.0))
    monkeypatch.delenv("RIBBIT_THREADS", raising=False)
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    meta = {"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 64,
            "llama.attention.head_count": 4, "llama.context_length": 4096}
    plan = plan_memory(path, 4096, free=8 << 30, cores=2, meta=meta)
    assert plan.n_threads == 2 and "2 physical cores" in plan.describe()


def test_backend_reports_the_choice_and_why(tmp_path, monkeypatch):
    monkeypatch.setenv("RIBBIT_THREADS", "1")
    model = make_model(tmp_path / "states", persist_states=False, n_threads=None)
    try:
        assert model.plan.n_threads == 1 and model.llm.params.n_threads == 1
        assert model.info.threads == "1t fixed" and "RIBBIT_THREADS" in (model.info.threads_reason or "")
    finally:
        model.close()
    monkeypatch.delenv("RIBBIT_THREADS")
    model = make_model(tmp_path / "states", persist_states=False, n_threads=2)
    try:
        assert model.llm.params.n_threads == 2 and "--threads" in (model.info.threads_reason or "")
    finally:
        model.close()


@pytest.mark.parametrize("argv", [["--threads", "0"], ["--draft", "sometimes"], ["--temperature", "-1"],
                                  ["run", "task", "--threads", "x"]])
def test_bad_engine_flags_are_usage_errors(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error" in err


def test_doctor_says_why(monkeypatch, capsys):
    monkeypatch.setenv("RIBBIT_THREADS", "3")
    from app.doctor import doctor_main

    doctor_main([])
    out = capsys.readouterr().out
    assert "3 threads (RIBBIT_THREADS)" in out
    assert "drafting" in out and "prompt lookup" in out


def test_prompt_speed_is_measured_for_budgets(tmp_path):
    from models.chat import ChatMessage
    from tests.engine.conftest import run_turn

    model = make_model(tmp_path / "states", persist_states=False)
    try:
        assert model.info.prompt_tokens_per_s is None
        long_system = ChatMessage(role="system", content="You are terse. " * 20)
        run_turn(model, [long_system, ChatMessage(role="user", content="Hi.")], max_tokens=2)
        assert model.info.prompt_tokens_per_s is not None and model.info.prompt_tokens_per_s > 1
    finally:
        model.close()
