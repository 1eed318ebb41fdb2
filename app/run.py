"""`ribbit run TASK`: one task, no TUI. Progress on stderr, the patch on stdout (or --patch-out)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, TextIO

from agent.session import ApprovalDecision, ApprovalRequest, Approver, BashApprovalRequest
from agent.session import AgentEvent, ContextEvent, EventSink, NoticeEvent, StopReason, SummaryEvent
from agent.session import JournalError
from agent.session import Limits
from agent.session import SavedSession, SessionError, SessionStore
from agent.session import TranscriptWriter, fanout
from agent.session import RejectAll, SetupError, check_repo, check_state, open_workspace, outside_git
from agent.session import CommitError, Workspace
from app.args import engine_options
from app.visible import visible
from models.base import ChatModel, ModelError
from models.embedded import DEMO_LIMITS, EMBEDDED_NAME, WORKING_MODELS, is_embedded
from models.backends import load_model

EXIT_CODES: dict[StopReason, int] = {
    "finished": 0, "error": 1, "max_steps": 3, "context": 3, "turn_tokens": 3, "interrupted": 130,
}


class LineReader:
    """Standard input shared by the task (`-`) and the approval answers that follow it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="replace")  # bytes that are not UTF-8 become U+FFFD, not a traceback

    def readline(self) -> str | None:
        line = self.stream.readline()
        return None if line == "" else line.rstrip("\r\n")

    def read_task(self) -> str:
        lines = []
        while (line := self.readline()) is not None and line.strip() != "":
            lines.append(line)
        return "\n".join(lines)


def parse_decision(line: str | None) -> ApprovalDecision:
    """`y`, `n`, or `n: reason`; end of input (None) and anything unclear mean no."""
    if line is None:
        return ApprovalDecision(approved=False, reason=None)
    text = line.strip()
    if text.lower() in ("y", "yes"):
        return ApprovalDecision(approved=True)
    if text.lower().startswith("n"):
        _, _, reason = text.partition(":")
        return ApprovalDecision(approved=False, reason=reason.strip() or None)
    return ApprovalDecision(approved=False, reason=f"unrecognised answer {text!r}")


class StdinApprover:
    def __init__(self, reader: LineReader, out: TextIO) -> None:
        self.reader, self.out = reader, out

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        # Every piece of the question was chosen by the model: shown escaped, and a command's
        # further lines behind a gutter, so nothing in it can pose as ribbit's own prompt.
        if isinstance(request, BashApprovalRequest):
            first, *more = request.command.split("\n")
            command = visible(first) + "".join(f"\n  | {visible(line)}" for line in more)
            self.out.write(f"\n? run in {visible(request.cwd, one_line=True)} ({request.where()}): {command}\n  [y/n/n: reason] ")
        else:
            later = getattr(request, "runs_later", None)
            self.out.write(
                f"\n? {visible(request.tool, one_line=True)} {visible(request.path, one_line=True)}"
                + (f"  (runs code on your machine later: {later})" if later else "") + "\n"
                f"{visible(request.diff)}  [y/n/n: reason] "
            )
        self.out.flush()
        decision = parse_decision(self.reader.readline())
        self.out.write("approved\n" if decision.approved else "rejected\n")
        return decision


class ProgressPrinter:
    """Human-readable progress for stderr: what the model says, each call and how it ended."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.at_line_start = True

    def __call__(self, event: AgentEvent) -> None:
        kind = event.type
        if kind == "text_delta":
            self._write(visible(event.text, prose=True))  # type: ignore[union-attr]
        elif kind == "tool_call":
            call = event.call  # type: ignore[union-attr]
            args = ", ".join(f"{_short(k, 30)}={_short(v)}" for k, v in call.arguments.items())
            self._line(f"> {visible(call.name, one_line=True)}({args})")
        elif kind == "tool_result":
            first = (event.output.strip().splitlines() or [""])[0]  # type: ignore[union-attr]
            mark = "x" if event.is_error else "<"  # type: ignore[union-attr]
            self._line(f"  {mark} {_short(first, 100)}")
        elif kind == "context":
            e: ContextEvent = event  # type: ignore[assignment]
            self._line(f"ribbit: context grew from {e.before} to {e.to} tokens ({e.seconds:.2f} s, nothing read again)")
        elif kind == "notice":
            self._line(f"ribbit: {event.level}: {visible(event.text)}")  # type: ignore[union-attr]
        elif kind == "summary":
            s: SummaryEvent = event  # type: ignore[assignment]
            self._line(f"ribbit: {s.stop_reason} after {s.steps} steps; files changed: {len(s.files_changed)}")

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self.at_line_start = text.endswith("\n")

    def _line(self, text: str) -> None:
        self._write(("" if self.at_line_start else "\n") + text + "\n")


def _short(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = visible(text[: limit * 8], one_line=True)  # escapes can grow it; cut after escaping
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fail(message: str) -> int:
    print(f"ribbit: error: {visible(message, one_line=True)}", file=sys.stderr)
    return 1


def write_patch(patch: str, stdout: IO[str]) -> None:
    """The patch's own bytes (git's output may hold file bytes that are not UTF-8), or, on a
    terminal, a view of it with control characters escaped."""
    if stdout.isatty():
        stdout.write(visible(patch))
    elif hasattr(stdout, "buffer"):
        stdout.flush()
        stdout.buffer.write(patch.encode("utf-8", "surrogateescape"))
    else:
        stdout.write(patch)
    stdout.flush()


def saved_session(args: argparse.Namespace) -> SavedSession | None:
    """The saved session `--continue` / `--resume ID` names, or None for a new one."""
    if getattr(args, "cont", False) and getattr(args, "resume", None):
        raise SessionError("--continue and --resume name different sessions; give one")
    if getattr(args, "cont", False):
        return SessionStore(check_repo(args.repo)).latest()
    if getattr(args, "resume", None):
        return SessionStore(check_repo(args.repo)).load(args.resume)
    return None


def run_command(args: argparse.Namespace, stdin: TextIO | None = None, stdout: IO[str] | None = None) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    reader = LineReader(stdin)
    task = reader.read_task() if args.task == "-" else args.task
    if not task.strip():
        print("ribbit run: error: the task is empty", file=sys.stderr)
        return 2
    dry_run = getattr(args, "dry_run", False)
    commit = getattr(args, "commit", False)
    if commit and (args.mode in ("plan", "review") or dry_run):
        why = "--dry-run changes nothing" if dry_run else f"{args.mode} mode cannot commit"
        print(f"ribbit run: error: --commit: {why}", file=sys.stderr)
        return 2
    if dry_run and args.mode == "plan":
        print("ribbit run: error: --dry-run has no use in plan mode, which changes nothing anyway", file=sys.stderr)
        return 2
    limits = Limits(max_steps=args.max_steps, context=args.context, turn_tokens=args.max_turn_tokens,
                    tool_output_tokens=args.tool_output_tokens)
    try:
        root = check_repo(args.repo)  # before a model loads: a wrong folder is one line at once
        check_state()
        resume = saved_session(args)
    except (SetupError, SessionError) as exc:
        return fail(str(exc))
    not_git = outside_git(root)
    if not_git:
        print(f"ribbit: note: {visible(not_git, one_line=True)}", file=sys.stderr)
    writer = TranscriptWriter(Path(args.transcript)) if args.transcript else None
    try:
        model = load_model(args.model, context=args.context, engine=engine_options(args))
    except ModelError as exc:
        return fail(str(exc))
    if is_embedded(model.info.path):
        print(f"ribbit: note: {EMBEDDED_NAME} is {DEMO_LIMITS}; {WORKING_MODELS}", file=sys.stderr)
    sink = fanout([s for s in (ProgressPrinter(sys.stderr), writer) if s is not None])
    try:
        if args.mode == "review" or dry_run:
            if resume is not None:
                return fail("review mode and --dry-run work in a worktree of their own and cannot continue a saved session")
            approver = RejectAll() if dry_run else StdinApprover(reader, sys.stderr)
            return run_review(model, args, task, limits, sink, approver, stdout, dry_run=dry_run)
        workspace = open_workspace(
            model, root, mode=args.mode, approver=StdinApprover(reader, sys.stderr), sink=sink,
            limits=limits, no_sandbox=args.no_sandbox, reasoning=args.reasoning, save=True, resume=resume,
        )
        if workspace.saved is not None:
            print(f"ribbit: session {workspace.saved.session_id} (go on with: ribbit run --continue TASK)", file=sys.stderr)
        allowed = workspace.allowed_prefixes()
        if allowed and args.mode in ("ask", "auto-edit"):
            print(f"ribbit: note: run without asking here, read-only (you allowed them; `ribbit allow` lists and "
                  f"revokes): {visible(', '.join(allowed), one_line=True)}", file=sys.stderr)
        try:
            summary = workspace.run_interruptibly(task)
            try:
                patch = workspace.patch()
            except JournalError as exc:  # a full disk: no patch, but the start snapshot still holds the files
                raise JournalError(f"{exc}; the files stay as the agent left them, `ribbit undo "
                                   f"{workspace.session_id}` puts them back") from None
            if commit and not commit_headless(workspace, summary):
                return 1
        finally:
            workspace.close()  # stops the watcher thread (in-process callers run many sessions)
    except (SetupError, JournalError, ModelError, SessionError, OSError) as exc:
        return fail(str(exc))
    finally:
        if writer:
            writer.close()
        model.close()
    failed = emit_patch(patch, args, stdout)
    if failed:
        return failed
    if patch and summary.files_changed:
        print(f"ribbit: the patch records what changed; your checkout already has it (undo: ribbit undo "
              f"{workspace.session_id}; a patch without touching the checkout: --dry-run)", file=sys.stderr)
    return EXIT_CODES[summary.stop_reason]


def commit_headless(workspace: Workspace, summary: SummaryEvent) -> bool:
    """`--commit`: draft a message and commit the session's files; False when the commit itself failed."""
    if summary.stop_reason != "finished":
        print(f"ribbit: not committed: the run ended with {summary.stop_reason}", file=sys.stderr)
        return True
    try:
        plan = workspace.plan_commit()
    except CommitError as exc:
        print(f"ribbit: not committed: {visible(str(exc), one_line=True)}", file=sys.stderr)
        return True
    try:
        message = workspace.draft_commit_message(plan)
    except ModelError as exc:
        print(f"ribbit: error: --commit: the model could not draft a message: {visible(str(exc), one_line=True)}",
              file=sys.stderr)
        return False
    if not message:
        print("ribbit: error: --commit: the model drafted an empty message; nothing was committed", file=sys.stderr)
        return False
    try:
        commit_id = workspace.commit(plan, message)
    except CommitError as exc:
        fail(str(exc))
        return False
    subject = message.splitlines()[0]
    print(f"ribbit: committed {commit_id[:12]} {visible(subject, one_line=True)!r}: "
          f"{visible(', '.join(plan.shown), one_line=True)}", file=sys.stderr)
    return True


def run_review(
    model: ChatModel, args: argparse.Namespace, task: str, limits: Limits, sink: EventSink, approver: Approver,
    stdout: IO[str], dry_run: bool = False,
) -> int:
    """`ribbit run --mode review`: run, review each hunk on stdin, apply, print the applied patch.
    `--dry-run`: run the same way, print the whole proposed patch, apply nothing."""
    from agent.session import ReviewSession, review_interactively

    review = ReviewSession(model, Path(args.repo), sink=sink, limits=limits, no_sandbox=args.no_sandbox,
                           reasoning=args.reasoning)
    try:
        summary = review.run(task)
        proposal = review.proposal()
        if not proposal.files:
            sink(NoticeEvent(level="info", text="review: the agent changed no files"))
        if dry_run:
            patch = proposal.patch
            sink(NoticeEvent(level="info", text=f"dry run: {len(proposal.files)} file(s) changed in a temporary "
                             f"copy; nothing was applied to {review.root} (git apply the patch to keep it)"))
            return emit_patch(patch, args, stdout) or EXIT_CODES[summary.stop_reason]
        selection = review_interactively(proposal, approver)
        result = review.apply(proposal, selection)
    finally:
        review.close()
    for path, why in result.skipped.items():
        sink(NoticeEvent(level="warning", text=f"review: {path} not applied: {why}"))
    total = sum(f.item_count for f in proposal.files)
    done = sum(len(v) for v in result.applied.values())
    sink(NoticeEvent(level="info", text=f"review: applied {done} of {total} hunks to {review.root}"))
    return emit_patch(result.patch, args, stdout) or EXIT_CODES[summary.stop_reason]


def emit_patch(patch: str, args: argparse.Namespace, stdout: IO[str]) -> int:
    """The patch to --patch-out or stdout; 0, or 1 when the file cannot be written (said on stderr)."""
    if args.patch_out:
        try:
            Path(args.patch_out).write_bytes(patch.encode("utf-8", "surrogateescape"))
        except OSError as exc:
            return fail(f"cannot write the patch to {args.patch_out}: {exc.strerror or exc}")
    else:
        write_patch(patch, stdout)
    return 0
