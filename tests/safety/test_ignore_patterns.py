"""Issue 33, hole 9: a .gitignore the agent writes cannot hang ribbit on the host.

ribbit reads .gitignore files itself where git does not look (a repository nested in the work tree:
the journal's walk and Glob's listing). With a backtracking matcher, `*a*a*a*a*a*a*a*a*c` beside a
file named with 200 `a`s took longer than any session (55 s for a 60-letter name, exponential in the
length). The attack runs as a real `ribbit run` in full-auto (real git, real bubblewrap, replayed
model): one Bash command makes the nested repository, the journal records it after the step, Glob
lists it. The subprocess's timeout is the hang guard (a generous deadline, not a timing check: the
walk's time is printed by `python -m bench.hostile`); what is checked is the outcome: the patch and
the Glob result hold the nested files the patterns do not ignore, and none they do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.undo import worktree as snapshot
from agent.core.tools import glob
from tests.conftest import xml_call
from tests.safety.cli import ribbit_cli, write_replay
from tests.safety.helpers import tool_outputs
from tests.safety.sandbox_helpers import session

LONG_NAME = "a" * 200
HOSTILE_IGNORE = "\n".join([
    "*a*a*a*a*a*a*a*a*c",  # within a name
    "**/*a*a*a*a*a*a*a*a*c/**",  # across folders
    "a*a*a*a*a*a*a*a*a*a*a*a*c/",  # folders only
    "*.log",  # one that does match, so ignoring still works
])


def test_a_pathological_gitignore_in_a_nested_repository_cannot_hang_ribbit(repo: Path, tmp_path: Path) -> None:
    make = (
        "git init -q sub && mkdir -p sub/deep/" + "a/" * 20 + " && "
        f"printf '%s\\n' {' '.join(repr(line) for line in HOSTILE_IGNORE.splitlines())} > sub/.gitignore && "
        f"echo x > sub/{LONG_NAME} && echo y > sub/deep/{'a/' * 20}{LONG_NAME} && echo z > sub/debug.log && echo made"
    )
    turns = [
        xml_call("Bash", command=make),
        xml_call("Glob", pattern="sub/**"),
        "done",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto", timeout=180)
    run.assert_clean_exit(0)
    made, listed = run.tool_results()
    assert made == "made"
    assert (repo / "sub" / ".gitignore").read_text() == HOSTILE_IGNORE + "\n"
    deep = f"sub/deep/{'a/' * 20}{LONG_NAME}"
    # The journal walked the nested repository: its files are in the session's patch, the ignored one not.
    patch = run.stdout.decode()
    assert f"+++ b/sub/{LONG_NAME}" in patch and f"+++ b/{deep}" in patch and "+++ b/sub/.gitignore" in patch
    assert "debug.log" not in patch
    # Glob walked it too (newest first; the same three files).
    assert sorted(listed.splitlines()) == sorted(["sub/.gitignore", f"sub/{LONG_NAME}", deep])


def test_a_megabyte_of_slow_patterns_stops_the_walk_at_its_limit_and_says_so(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each match is linear, but 55,000 hostile patterns times 300 long names is still ~20 s of work per
    walk. The walks stop at IGNORE_WALK_SECONDS (set to 0.5 s here) and name what they left: the
    journal in a notice, Glob in its result. Files the journal recorded before stay recorded."""
    monkeypatch.setattr(snapshot, "IGNORE_WALK_SECONDS", 0.5)
    monkeypatch.setattr(glob, "IGNORE_WALK_SECONDS", 0.5)
    make = (
        "git init -q sub && mkdir sub/more && "
        "python3 -c \"open('sub/.gitignore', 'w').write('*a*a*a*a*a*a*a*a*c\\n' * 55000)\" && "
        f"for i in $(seq 100 399); do echo $i > sub/more/${{i}}{'a' * 200}; done && echo made"
    )
    turns = [xml_call("Bash", command=make), xml_call("Glob", pattern="sub/**"), "done"]
    workspace, recorder, _ = session(repo, tmp_path, *turns)
    made, listed = tool_outputs(recorder)
    assert made == "made"
    assert "(Listing stopped after 0.5 s: the .gitignore patterns in sub/" in listed
    notices = [e.text for e in recorder.of_type("notice")]  # type: ignore[attr-defined]
    assert any("journal: not recorded" in n and "took over 0.5 s to match" in n for n in notices), notices
