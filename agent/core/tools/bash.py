from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pathlib import Path

from pydantic import Field

from agent.core.approvals import Access, ApprovalDecision, BashApprovalRequest, CommandNeed
from agent.core.output_budget import OutputBudget
from agent.sandbox.runner import CommandResult, SandboxError, tried_to_write
from agent.sandbox.output_spool import Spool
from agent.core.tools.base import CallSummary, Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.paths import display_path

MAX_OUTPUT_CHARS = 30_000
READ_ONLY_NOTE = (
    "Note: this command ran without asking, so with the repository read-only; it tried to write, "
    "and nothing was changed."
)
PLAN_READ_ONLY_NOTE = (
    "Note: plan mode runs every command with the repository read-only; this one tried to write, and "
    "nothing was changed. It cannot write in plan mode: put the change in your plan instead."
)


class BashArgs(ToolArgs):
    command: str = Field(description="The bash command to run")
    timeout: int = Field(120, ge=1, le=600, description="Seconds before the command is killed (at most 600)")
    description: str | None = Field(None, description="A few words saying what the command does")


# Tokens kept free in a budgeted result for the note that says what was cut and where it is.
NOTE_TOKENS = 120


def fit_output(text: str, dropped_lines: int, budget: OutputBudget, spool: Spool | None) -> str:
    """The head and the tail of the output in whole lines, within the token budget and the contract's
    30,000 characters; what is cut is named by line numbers, with the Read call that shows it from the
    saved whole output (`spool`). Output that fits is returned as it is and nothing is kept."""
    if len(text) <= MAX_OUTPUT_CHARS and not dropped_lines and budget.fits(text):
        if spool is not None:
            spool.discard()
        return text
    lines = text.split("\n")
    ends_with_newline = lines[-1] == ""
    if ends_with_newline:
        lines.pop()
    half_chars = MAX_OUTPUT_CHARS // 2
    half_tokens = max(1, (budget.tokens - NOTE_TOKENS) // 2) if budget.tokens is not None else half_chars
    head = budget.head(lines, half_tokens, half_chars)
    tail = budget.tail(lines[head:], half_tokens, half_chars)
    total = spool.lines if spool is not None else len(lines) + dropped_lines
    head_text = "\n".join(lines[:head])
    tail_text = "\n".join(lines[len(lines) - tail :]) if tail else ""
    if head == 0:  # one line longer than the whole budget: show its start
        head_text = _line_start(lines[0], half_tokens, half_chars, budget) + " [... line cut]" if lines else ""
    first_cut, last_cut = head + 1, total - tail
    cut = max(0, last_cut - first_cut + 1)
    where = f"lines {first_cut}-{last_cut} of {total}" if cut > 1 else f"line {first_cut} of {total}"
    if spool is not None and spool.keep():
        saved = "the whole output is saved" if spool.complete else f"its first {spool.written} bytes are saved"
        note = (f"[{cut} lines cut from the middle of the output ({where}); {saved}: "
                f"Read file_path=\"{spool.path}\" offset={first_cut} shows them]")
    else:
        note = f"[{cut} lines cut from the middle of the output ({where})]"
    body = f"{head_text}\n\n... {note} ...\n\n{tail_text}"
    return body + ("\n" if ends_with_newline and tail_text else "")


def _line_start(line: str, tokens: int, chars: int, budget: OutputBudget) -> str:
    """As much of the start of `line` as fits (a few counts: the cut is estimated, then checked)."""
    n = min(len(line), chars)
    for _ in range(6):
        used = budget.count(line[:n])
        if used <= tokens or n <= 1:
            break
        n = max(1, int(n * tokens / used * 0.95))
    return line[:n]


class BashTool(Tool[BashArgs]):
    name = "Bash"
    description = (
        "Run a bash command in the repository (working directory kept between calls, no input). "
        "Output is stdout and stderr together."
    )
    args_model = BashArgs
    runs_commands = True

    @classmethod
    def summary(cls, arguments: Mapping[str, Any]) -> CallSummary:
        return CallSummary(str(arguments.get("command", "")))

    def run(self, args: BashArgs, ctx: ToolContext) -> str:
        if not args.command.strip():
            raise ToolError("command is empty")
        if "\x00" in args.command:  # bash cannot carry a NUL in its argument; say so before asking anyone
            raise ToolError("command contains a NUL byte; bash cannot run it")
        approvals = ctx.approvals
        plan = approvals.plan_command(args.command)
        decision = approvals.decide(CommandNeed(args.command), lambda: self._request(args, ctx, plan.access))
        if decision is not None and not decision.approved:
            return _rejected("The user rejected this command; it was not run.", decision)
        spool = ctx.outputs.new_spool() if ctx.outputs is not None else None
        result = self._execute(args, ctx, plan.access, spool)
        note = ""
        held = plan.held
        if held is None and plan.may_ask_to_write and tried_to_write(result):
            held = approvals.checkout_held()  # running it again writable needs the checkout
        if held is not None:
            note = f"Note: the command ran read-only: {held}." if plan.held or tried_to_write(result) else ""
        elif tried_to_write(result):
            # Ask mode means what it says: a command that needs to write runs only after a yes.
            decision = approvals.decide(
                CommandNeed(args.command, tried_to_write=True),
                lambda: self._request(args, ctx, "read-write", tried_to_write=True),
            ) if plan.may_ask_to_write else None
            if decision is not None and decision.approved:
                if spool is not None:
                    spool.discard()
                    spool = ctx.outputs.new_spool() if ctx.outputs is not None else None
                result = self._execute(args, ctx, "read-write", spool)
            else:
                note = PLAN_READ_ONLY_NOTE if approvals.mode == "plan" else READ_ONLY_NOTE if decision is None else _rejected(
                    READ_ONLY_NOTE + " The user did not allow running it with write access.", decision
                )
        return self._format(args, ctx, result, note, spool)

    @staticmethod
    def _request(args: BashArgs, ctx: ToolContext, access: Access, tried_to_write: bool = False) -> BashApprovalRequest:
        return BashApprovalRequest(
            tool_call_id=ctx.tool_call_id, command=args.command,
            cwd=display_path(ctx.root, ctx.shell.cwd) if ctx.shell.cwd != ctx.root else ".",
            sandboxed=ctx.runner.sandboxed, description=args.description, access=access,
            tried_to_write=tried_to_write,
        )

    @staticmethod
    def _execute(args: BashArgs, ctx: ToolContext, access: Access, spool: Spool | None = None) -> CommandResult:
        try:
            if spool is None:
                return ctx.runner.run(args.command, ctx.shell.cwd, float(args.timeout), ctx.cancel, access=access)
            return ctx.runner.run(args.command, ctx.shell.cwd, float(args.timeout), ctx.cancel, access=access, spool=spool)
        except SandboxError as exc:
            if spool is not None:
                spool.discard()
            raise ToolError(str(exc)) from None

    def _format(self, args: BashArgs, ctx: ToolContext, result: CommandResult, note: str, spool: Spool | None = None) -> str:
        cwd_note = self._follow_cwd(ctx, result.cwd)
        output = fit_output(result.output, result.dropped_lines, ctx.budget, spool).rstrip("\n") + cwd_note
        if note:
            output = (output + "\n" if output else "") + note
        if result.timed_out:
            return (output + "\n" if output else "") + f"Command timed out after {args.timeout} s"
        if result.cancelled:
            return (output + "\n" if output else "") + "Command stopped by the user"
        if result.stopped:
            return (output + "\n" if output else "") + result.stopped[:1].upper() + result.stopped[1:]
        if result.exit_code:
            output = (output + "\n" if output else "") + f"Exit code {result.exit_code}"
        if result.capped:  # the kernel held a cap (agent.sandbox.caps): the model should know why
            output = (output + "\n" if output else "") + result.capped[:1].upper() + result.capped[1:]
        return output or "(no output)"

    @staticmethod
    def _follow_cwd(ctx: ToolContext, cwd: Path | None) -> str:
        """Keep the shell's new directory if it is inside the repo; else reset, and say so."""
        if cwd is None:
            return ""
        try:
            resolved = cwd.resolve()
        except (OSError, RuntimeError):
            resolved = None
        if resolved is not None and resolved.is_dir() and (resolved == ctx.root or resolved.is_relative_to(ctx.root)):
            ctx.shell.cwd = resolved
            return ""
        ctx.shell.cwd = ctx.root
        return "\n(The working directory is outside the repository; it was reset to the root.)"


def _rejected(text: str, decision: ApprovalDecision) -> str:
    return text + (f" Their reason: {decision.reason}" if decision.reason else "")
