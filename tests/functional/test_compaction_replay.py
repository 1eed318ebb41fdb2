"""Compaction through `ribbit run` with the replay model: a session that overflows a 4,096-token context
finishes its task; the limit on compactions per run ends a loop of them with exit 3."""

from __future__ import annotations

from pathlib import Path

from agent.core.compaction import MAX_COMPACTIONS_PER_RUN, ContextBudget
from tests.conftest import xml_call
from tests.functional.helpers import ribbit_run

SUMMARY = "Files: big.txt read (a log, nothing to change). Decisions: the bug is in calc.py. State: fix calc.py next."


def big_file(repo: Path, lines: int = 200) -> None:
    (repo / "big.txt").write_text("".join(f"log line {i:04d}: " + "x" * 34 + "\n" for i in range(lines)))


def test_a_session_that_overflows_a_4k_context_finishes_through_compaction(capsys, tmp_path, repo, replay_file):
    big_file(repo)
    turns = [
        xml_call("Read", file_path="big.txt"),
        SUMMARY,  # the compaction's summary turn
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        "Fixed: add() now adds.",
    ]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns), "--context", "4096", "--mode", "auto-edit",
                        "--tool-output-tokens", "4000")  # results whole, so the context overflows
    assert result.code == 0, result.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"  # the task is done, on disk
    compactions = result.of_type("compaction")
    assert len(compactions) == 1, result.stderr
    event = compactions[0]
    assert event["before_tokens"] > event["after_tokens"] and event["after_tokens"] < 4096 // 2
    assert event["trigger"] == "auto" and event["summary"] == SUMMARY
    assert result.events[-1]["type"] == "summary" and result.events[-1]["stop_reason"] == "finished"
    # The conversation went on from the task + the summary + the latest result (cut to its share).
    restart = next(e["message"] for e in result.events if e["type"] == "message"
                   and e["message"]["role"] == "user" and SUMMARY in e["message"]["content"])
    assert restart["content"].startswith("fix the bug")
    types = [e["type"] for e in result.events]
    after = types.index("compaction")
    usage_after = [e for e in result.events[after:] if e["type"] == "usage"]
    assert usage_after and all(u["prompt_tokens"] < 4096 for u in usage_after)
    assert usage_after[0]["prompt_tokens"] < event["before_tokens"]


def test_the_compaction_limit_ends_a_loop_of_them_with_exit_3(capsys, tmp_path, repo, replay_file):
    big_file(repo)
    turns = []
    for _ in range(MAX_COMPACTIONS_PER_RUN + 1):
        turns += [xml_call("Read", file_path="big.txt"), SUMMARY]
    result = ribbit_run(capsys, tmp_path, repo, replay_file(*turns), "--context", "4096", "--mode", "auto-edit",
                        "--tool-output-tokens", "4000")  # results whole, so the context overflows
    assert result.code == 3, result.stderr
    assert len(result.of_type("compaction")) == MAX_COMPACTIONS_PER_RUN
    summary = result.events[-1]
    assert summary["type"] == "summary" and summary["stop_reason"] == "context"
    assert f"after {MAX_COMPACTIONS_PER_RUN} compactions" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_reserve_scales_with_the_window() -> None:
    """A fixed reserve eats a small window (opencode#45368): here every share grows with the window."""
    small, mid, large = (ContextBudget(window=w, base=1100) for w in (4096, 32768, 131072))
    for budget in (small, mid, large):
        reserve = budget.summary_reserve + budget.turn_reserve
        assert reserve < budget.free * 0.6, budget  # most of the free window stays for the conversation
    assert small.summary_tokens < mid.summary_tokens <= large.summary_tokens
    assert small.turn_reserve < mid.turn_reserve < large.turn_reserve
    # a 4K window with FrogNano's ~1,100-token system prompt still has room for real work between compactions
    assert small.window - small.base - small.summary_reserve - small.turn_reserve > 1500
