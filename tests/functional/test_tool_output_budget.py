"""Tool results sized by the token budget, through real sessions: a replayed session (real sandbox, real
git) whose model follows the cut note to the rest, `--tool-output-tokens` on the command line, and the
budget computed from the embedded GGUF's measured prompt speed with its own tokenizer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from agent.core.output_budget import SECONDS_PER_RESULT, budget_for
from agent.session.workspace import open_workspace
from models.base import Chunk, GenerationRequest
from models.replay import ReplayModel
from tests.conftest import xml_call
from tests.functional.helpers import ribbit_run
from tests.safety.helpers import Recorder, YesApprover, tool_outputs, write_replay

SAVED_NOTE = re.compile(r'Read file_path="(?P<path>[^"]+)" offset=(?P<offset>\d+)')
READ_NOTE = re.compile(r"Read again with offset=(?P<offset>\d+)")
MEGABYTE = "python3 -c \"import sys; [print(f'line {i:06d} ' + 'x' * 40) for i in range(1, 21000)]\""


class NoteFollower(ReplayModel):
    """Replays its turns; a turn "FOLLOW" becomes the Read call the last tool result's note names."""

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        if self.position < len(self.turns) and self.turns[self.position] == "FOLLOW":
            last = request.messages[-1].content
            saved, again = SAVED_NOTE.search(last), READ_NOTE.search(last)
            if saved:
                call = xml_call("Read", file_path=saved.group("path"), offset=saved.group("offset"))
            else:
                assert again, last[-300:]
                call = xml_call("Read", file_path="big.txt", offset=again.group("offset"))
            self.turns[self.position] = call
        yield from super().generate(request)


def test_a_session_reads_a_5000_line_file_and_1_mb_of_output_in_budget_and_gets_the_rest(repo: Path, tmp_path: Path) -> None:
    (repo / "big.txt").write_text("".join(f"row {n}\n" for n in range(1, 5001)))
    turns = [xml_call("Read", file_path="big.txt"), "FOLLOW", xml_call("Bash", command=MEGABYTE), "FOLLOW", "done"]
    model = NoteFollower(write_replay(tmp_path / "r.jsonl", *turns))
    recorder = Recorder()
    workspace = open_workspace(
        model, repo, mode="full-auto", approver=YesApprover(), sink=recorder, watch=False,  # type: ignore[arg-type]
    )
    from agent.core.loop import Limits

    workspace.session.limits = Limits(tool_output_tokens=1500)
    try:
        summary = workspace.session.run("read everything")
        read1, read2, bash, saved_read = tool_outputs(recorder)
        budget = workspace.session.output_budget()
        assert budget.tokens == 1500
        for out in (read1, read2, bash, saved_read):
            assert budget.counted(out, 10**9) <= 1500
        # The file: the second Read starts exactly where the first stopped.
        last_shown = int(read1.split("\n\n(Showing")[0].splitlines()[-1].split("\t")[0])
        assert read2.splitlines()[0] == f"{last_shown + 1:>6}\trow {last_shown + 1}"
        # The command: head and tail kept, the cut lines read back from the saved output, outside the repo.
        note = SAVED_NOTE.search(bash)
        assert note and bash.startswith("line 000001 ") and bash.rstrip().endswith("line 020999 " + "x" * 40)
        offset = int(note.group("offset"))
        assert saved_read.splitlines()[0] == f"{offset:>6}\tline {offset:06d} " + "x" * 40
        assert not Path(note.group("path")).is_relative_to(repo)
        assert summary.stop_reason == "finished" and summary.files_changed == []
        status = __import__("subprocess").run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
        assert status.stdout == "?? big.txt\n"  # the test's own file; nothing saved into the user's tree
    finally:
        workspace.close()
    assert not Path(note.group("path")).exists()  # the saved outputs go with the session


def test_tool_output_tokens_flag_on_ribbit_run(capsys, repo: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (repo / "big.txt").write_text("".join(f"row {n}\n" for n in range(1, 5001)))
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Read", file_path="big.txt"), "done")
    small = ribbit_run(capsys, tmp_path, repo, replay, "--mode", "full-auto", "--tool-output-tokens", "300")
    assert small.code == 0
    out = small.tool_results()[0]
    assert (len(out) + 3) // 4 <= 300 and "budget of 300 tokens" in out
    bad = ribbit_run(capsys, tmp_path, repo, replay, "--tool-output-tokens", "0")
    assert bad.code == 2 and "--tool-output-tokens" in bad.stderr


def test_budget_from_the_embedded_models_measured_prompt_speed(repo: Path, tmp_path: Path) -> None:
    from agent.core.approvals import AllowList, ApprovalPolicy
    from agent.core.loop import AgentSession
    from agent.sandbox.runner import LocalRunner
    from models.chat import ToolCall
    from models.embedded import embedded_model_path
    from models.llama_backend import LlamaCppModel

    model = LlamaCppModel(embedded_model_path(), n_ctx=8192, temperature=0.0, n_threads=2, state_dir=tmp_path / "states")
    try:
        session = AgentSession(
            model, repo, policy=ApprovalPolicy("full-auto", AllowList(None), sandboxed=False), approver=YesApprover(),
            runner=LocalRunner(repo), sink=Recorder(),
        )
        assert model.info.prompt_tokens_per_s is None
        session.limits.turn_tokens = 1
        session.run("say hi")  # reads the system prompt: the prompt speed is measured there
        rate = model.info.prompt_tokens_per_s
        assert rate is not None and rate > 0
        budget = session.output_budget()
        assert budget.tokens == budget_for(rate, 8192).tokens
        assert budget.tokens <= 8192 // 4 and (budget.tokens == 8192 // 4 or budget.tokens == max(1000, int(rate * SECONDS_PER_RESULT)))
        text = "def frobnicate(value):\n    return value * 2\n"
        assert budget.count(text) == len(model.llm.tokenize(text.encode(), add_bos=False, special=False))
        (repo / "big.py").write_text("".join(f"def f_{n}(x):\n    return x + {n}\n" for n in range(2500)))
        session._budget = budget  # what execute() sets for each step
        out, is_error = session.run_tool(ToolCall(id="c1", name="Read", arguments={"file_path": "big.py"}))
        assert not is_error and "Read again with offset=" in out
        assert model.count_tokens(out) <= budget.tokens  # the real tokenizer agrees: the result fits
    finally:
        model.close()
