"""`@file`, `!command` and `/commit`'s draft on the real llama.cpp path (the embedded SmolLM2 GGUF): what the user hands over
enters the token stream once, appended; nothing the model read before is evaluated again."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.session import AgentEvent, Limits, RejectAll, UsageEvent, open_workspace
from models.backends import load_model

pytestmark = pytest.mark.real_model


def test_attached_file_is_evaluated_once_and_appended(repo: Path) -> None:
    (repo / "notes.txt").write_text("".join(f"note {i}: the add function must add\n" for i in range(1, 41)))
    model = load_model("default", context=4096)
    events: list[AgentEvent] = []
    workspace = open_workspace(model, repo, mode="ask", approver=RejectAll(), sink=events.append,
                               limits=Limits(max_steps=1, context=4096, turn_tokens=48), watch=False)
    try:
        workspace.run("Summarise @notes.txt in one line.", mentions=True)
        first = [e for e in events if isinstance(e, UsageEvent)]
        workspace.run_user_command("echo the tests pass")
        workspace.run("Thanks. Anything else?", mentions=True)
        workspace.session.answer("ribbit: write a one-line commit message for this.", 24)  # /commit's draft
        workspace.run("Good.", mentions=True)
        usages = [e for e in events if isinstance(e, UsageEvent)]
        messages = workspace.conversation()
        users = [m.content for m in messages if m.role == "user"]
        attached = users[0][users[0].index("The user attached"):]
        counted = model.count_tokens(attached)  # type: ignore[attr-defined]
    finally:
        workspace.close()
        model.close()
    assert sum(m.content.count("note 40: the add function must add") for m in messages) == 1
    assert users[1].startswith("Thanks.") and "The user ran `echo the tests pass`" in users[1]
    # The first turn read the file (with the system prompt and the task): at least the file's tokens.
    assert first[0].evaluated_tokens >= counted
    assert len(usages) >= 4 and usages[-1].evaluated_tokens > 0
    for before, after in zip(usages, usages[1:]):
        assert after.prompt_tokens == after.cached_tokens + after.evaluated_tokens
        # Append-only: everything read and written before is reused; only what was appended is evaluated.
        assert after.cached_tokens >= before.prompt_tokens + before.completion_tokens - 1
        assert after.evaluated_tokens <= after.prompt_tokens - (before.prompt_tokens + before.completion_tokens) + 1
