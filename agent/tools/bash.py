from __future__ import annotations

from pathlib import Path

from pydantic import Field

from agent.approvals import BashApprovalRequest, command_prefix
from agent.events import ApprovalEvent
from agent.tools.base import Tool, ToolArgs, ToolContext, ToolError
from agent.tools.paths import display_path

MAX_OUTPUT_CHARS = 30_000


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
        gate = ctx.changes
        if gate.policy.bash_needs_approval(args.command):
            decision = gate.approver.decide(
                BashApprovalRequest(
                    tool_call_id=ctx.tool_call_id, command=args.command,
                    cwd=display_path(ctx.root, ctx.cwd) if ctx.cwd != ctx.root else ".",
                    sandboxed=ctx.runner.sandboxed, description=args.description,
                )
            )
            gate.emit(
                ApprovalEvent(
                    tool_call_id=ctx.tool_call_id,
                    decision="approved" if decision.approved else "rejected",
                    reason=decision.reason,
                )
            )
            if not decision.approved:
                text = "The user rejected this command; it was not run."
                return text + (f" Their reason: {decision.reason}" if decision.reason else "")
            if decision.remember == "prefix":
                gate.policy.allow.add(command_prefix(args.command))
        result = ctx.runner.run(args.command, ctx.cwd, float(args.timeout), ctx.cancel)
        note = self._follow_cwd(ctx, result.cwd)
        output = truncate_output(result.output, result.dropped_lines).rstrip("\n") + note
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
        resolved = cwd.resolve()
        if resolved == ctx.root or resolved.is_relative_to(ctx.root):
            ctx.cwd = resolved
            return ""
        ctx.cwd = ctx.root
        return f"\n(The working directory {cwd} is outside the repository; it was reset to the root.)"
