from __future__ import annotations

from pathlib import Path

from pydantic import Field

from agent.approvals import Access, ApprovalDecision, BashApprovalRequest, CommandNeed
from agent.sandbox import CommandResult, SandboxError, tried_to_write
from agent.tools.base import Tool, ToolArgs, ToolContext, ToolError
from agent.tools.paths import display_path

MAX_OUTPUT_CHARS = 30_000
READ_ONLY_NOTE = (
    "Note: this command ran without asking, so with the repository read-only; it tried to write, "
    "and nothing was changed."
)


class BashArgs(ToolArgs):
    command: str = Field(description="The bash command to run")
    timeout: int = Field(120, ge=1, le=600, description="Seconds before the command is killed (at most 600)")
    description: str | None = Field(None, description="A few words saying what the command does")


def truncate_output(text: str, dropped_lines: int = 0) -> str:
    """Keep the head and the tail of long output and say how many lines were cut."""
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    half = MAX_OUTPUT_CHARS // 2
    cut = text[half:-half].count("\n") + dropped_lines
    return f"{text[:half]}\n\n... [{cut} lines cut from the middle of the output] ...\n\n{text[-half:]}"


class BashTool(Tool[BashArgs]):
    name = "Bash"
    description = (
        "Run a bash command in the repository (working directory kept between calls, no input). "
        "Output is stdout and stderr together."
    )
    args_model = BashArgs

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
        result = self._execute(args, ctx, plan.access)
        note = ""
        if tried_to_write(result):
            # Ask mode means what it says: a command that needs to write runs only after a yes.
            decision = approvals.decide(
                CommandNeed(args.command, tried_to_write=True),
                lambda: self._request(args, ctx, "read-write", tried_to_write=True),
            ) if plan.may_ask_to_write else None
            if decision is not None and decision.approved:
                result = self._execute(args, ctx, "read-write")
            else:
                note = READ_ONLY_NOTE if decision is None else _rejected(
                    READ_ONLY_NOTE + " The user did not allow running it with write access.", decision
                )
        return self._format(args, ctx, result, note)

    @staticmethod
    def _request(args: BashArgs, ctx: ToolContext, access: Access, tried_to_write: bool = False) -> BashApprovalRequest:
        return BashApprovalRequest(
            tool_call_id=ctx.tool_call_id, command=args.command,
            cwd=display_path(ctx.root, ctx.shell.cwd) if ctx.shell.cwd != ctx.root else ".",
            sandboxed=ctx.runner.sandboxed, description=args.description, access=access,
            tried_to_write=tried_to_write,
        )

    @staticmethod
    def _execute(args: BashArgs, ctx: ToolContext, access: Access) -> CommandResult:
        try:
            return ctx.runner.run(args.command, ctx.shell.cwd, float(args.timeout), ctx.cancel, access=access)
        except SandboxError as exc:
            raise ToolError(str(exc)) from None

    def _format(self, args: BashArgs, ctx: ToolContext, result: CommandResult, note: str) -> str:
        cwd_note = self._follow_cwd(ctx, result.cwd)
        output = truncate_output(result.output, result.dropped_lines).rstrip("\n") + cwd_note
        if note:
            output = (output + "\n" if output else "") + note
        if result.timed_out:
            return (output + "\n" if output else "") + f"Command timed out after {args.timeout} s"
        if result.cancelled:
            return (output + "\n" if output else "") + "Command stopped by the user"
        if result.exit_code:
            return (output + "\n" if output else "") + f"Exit code {result.exit_code}"
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
