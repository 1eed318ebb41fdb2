"""`--reasoning on|off` on `ribbit run`: reaches the model, and says so when the model has no switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import xml_call
from tests.engine.fake_openai import FakeOpenAI
from tests.functional.helpers import ribbit_run


@pytest.mark.parametrize("flag, sent", [(["--reasoning", "off"], False), (["--reasoning", "on"], True), ([], None)])
def test_the_flag_reaches_an_openai_server_as_enable_thinking(capsys, tmp_path: Path, repo: Path, monkeypatch,
                                                              flag: list[str], sent: bool | None) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI() as server:
        result = ribbit_run(capsys, tmp_path, repo, f"openai:{server.url}#fake-model", *flag, "--mode", "auto-edit")
    assert result.code == 0, result.stderr
    bodies = [r.body or {} for r in server.chat_requests()]
    assert bodies
    for body in bodies:
        if sent is None:
            assert "chat_template_kwargs" not in body  # a hosted endpoint may refuse unknown fields
        else:
            assert body["chat_template_kwargs"] == {"enable_thinking": sent}


def test_a_model_without_a_switch_says_so_and_runs(capsys, tmp_path: Path, repo: Path, replay_file) -> None:
    model = replay_file(xml_call("Read", file_path="calc.py"), "Done.")
    result = ribbit_run(capsys, tmp_path, repo, model, "--reasoning", "off")
    assert result.code == 0
    assert "has no reasoning switch" in result.stderr and "reasoning off is ignored" in result.stderr
    assert len(result.tool_results()) == 1


def test_a_bad_value_is_a_usage_error(capsys, tmp_path: Path, repo: Path, replay_file) -> None:
    result = ribbit_run(capsys, tmp_path, repo, replay_file("Done."), "--reasoning", "maybe")
    assert result.code == 2
    assert "'maybe' is not on or off" in result.stderr
