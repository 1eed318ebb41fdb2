"""Every question the TUI would ask, as `session/request_permission`, and the editor's answer as ribbit's
ApprovalDecision: allow once / allow always / reject (with the user's reason in the response's
`_meta.reason` where the editor sends one). Allow always means what the TUI's keys mean: for a change,
'approve all' (the session goes on in auto-edit); for a command, `p` (its narrow prefix runs here without
asking from now on, read-only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp import helpers
from acp.schema import (
    AllowedOutcome,
    ContentToolCallContent,
    FileEditToolCallContent,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallLocation,
    ToolCallUpdate,
)

from agent.session import ApprovalDecision, ApprovalRequest, BashApprovalRequest, EditApprovalRequest, command_prefix
from app.acp.updates import absolute, fenced, one_line, text_in_root

ALLOW_ONCE, ALLOW_ALWAYS, REJECT = "allow_once", "allow_always", "reject_once"


def split_lines(text: str) -> list[str]:
    """Lines with their ends, split at "\\n" only (as the diff that made the hunks)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def edit_texts(root: Path, request: EditApprovalRequest) -> tuple[str | None, str]:
    """(old text, new text) of the change the request shows: the file as it is now and that file with every
    hunk applied (what approving applies); where the file no longer matches the hunks, their lines alone."""
    path = absolute(root, request.path) or request.path
    current = None if request.is_new_file else text_in_root(root, path)
    if current is not None:
        lines = split_lines(current)
        if all(lines[h.old_start:h.old_start + len(h.old)] == h.old for h in request.hunks):
            for hunk in sorted(request.hunks, key=lambda h: h.old_start, reverse=True):
                lines[hunk.old_start:hunk.old_start + len(hunk.old)] = hunk.new
            return current, "".join(lines)
    old = "".join(line for h in request.hunks for line in h.old)
    new = "".join(line for h in request.hunks for line in h.new)
    return (None if request.is_new_file else old), new


def permission_request(root: Path, request: ApprovalRequest) -> tuple[ToolCallUpdate, list[PermissionOption]]:
    """The tool call the editor shows with the question, and the answers it offers."""
    if isinstance(request, BashApprovalRequest):
        prefix = command_prefix(request.command)
        lines = [fenced(request.command, "sh"), request.where()]
        if request.description:
            lines.insert(0, request.description)
        call = ToolCallUpdate(
            tool_call_id=request.tool_call_id, title=one_line(request.command) or "Bash", kind="execute",
            status="pending", content=[helpers.tool_content(helpers.text_block("\n\n".join(lines)))],
            locations=[ToolCallLocation(path=request.cwd)],
        )
        options = [PermissionOption(option_id=ALLOW_ONCE, name="Run", kind="allow_once")]
        if prefix:
            options.append(PermissionOption(
                option_id=ALLOW_ALWAYS, name=f"Run, and from now on `{prefix}` here without asking (read-only)",
                kind="allow_always"))
        options.append(PermissionOption(option_id=REJECT, name="Don't run", kind="reject_once"))
        return call, options
    path = absolute(root, request.path) or request.path
    content: list[ContentToolCallContent | FileEditToolCallContent] = []
    if isinstance(request, EditApprovalRequest):
        old, new = edit_texts(root, request)
        content.append(helpers.tool_diff_content(path, new, old))
        first = min((h.old_start for h in request.hunks), default=0) + 1
        location = ToolCallLocation(path=path, line=first)
    else:  # a review hunk (review mode is not offered here; answered all the same)
        content.append(helpers.tool_content(helpers.text_block(fenced(request.diff, "diff"))))
        location = ToolCallLocation(path=path)
    later = getattr(request, "runs_later", None)
    if later:
        content.append(helpers.tool_content(helpers.text_block(f"This file runs code on your machine later: {later}")))
    call = ToolCallUpdate(
        tool_call_id=request.tool_call_id, title=f"{request.tool} {request.path}", kind="edit", status="pending",
        content=content, locations=[location],
    )
    options = [PermissionOption(option_id=ALLOW_ONCE, name="Apply", kind="allow_once")]
    if isinstance(request, EditApprovalRequest):
        options.append(PermissionOption(option_id=ALLOW_ALWAYS, name="Apply, and the session's further changes "
                                        "without asking (auto-edit)", kind="allow_always"))
    options.append(PermissionOption(option_id=REJECT, name="Reject", kind="reject_once"))
    return call, options


def reason_in(meta: Any) -> str | None:
    reason = meta.get("reason") if isinstance(meta, dict) else None
    return reason.strip() or None if isinstance(reason, str) else None


def decision_from(response: RequestPermissionResponse, command: bool) -> ApprovalDecision:
    """The editor's answer as ribbit's decision (`command`: the question was about a Bash command); a
    cancelled question or an unknown option is a no."""
    outcome = response.outcome
    reason = reason_in(response.field_meta) or reason_in(getattr(outcome, "field_meta", None))
    if not isinstance(outcome, AllowedOutcome):
        return ApprovalDecision(approved=False, reason=reason or "the user cancelled")
    if outcome.option_id == ALLOW_ONCE:
        return ApprovalDecision(approved=True)
    if outcome.option_id == ALLOW_ALWAYS:
        return ApprovalDecision(approved=True, remember="prefix" if command else "session")
    if outcome.option_id == REJECT:
        return ApprovalDecision(approved=False, reason=reason)
    return ApprovalDecision(approved=False, reason=f"unrecognised answer {outcome.option_id[:40]!r}")
