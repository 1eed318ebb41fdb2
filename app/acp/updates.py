"""Agent events (and a saved conversation, for session/load) as ACP session updates.

Each tool call becomes a `tool_call` with its kind, a title, the file and line for the editor to follow,
and for Write/Edit the diff (path, old text, new text); its result a `tool_call_update` with the status
and, for the other tools, the output as its content. Plain functions over one `CallTracker` per session.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from acp import helpers
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    ContentToolCallContent,
    CurrentModeUpdate,
    FileEditToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    ToolKind,
    UsageUpdate,
    UserMessageChunk,
)

from agent.session import (
    AgentEvent,
    ApprovalEvent,
    CompactionEvent,
    ModeChanged,
    NoticeEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
)
from models.chat import ChatMessage, ToolCall

Update = (AgentMessageChunk | AgentThoughtChunk | ToolCallStart | ToolCallProgress | CurrentModeUpdate | UsageUpdate
          | UserMessageChunk)
ToolContent = ContentToolCallContent | FileEditToolCallContent

KINDS: dict[str, ToolKind] = {"Read": "read", "Write": "edit", "Edit": "edit", "Glob": "search", "Bash": "execute"}
TITLE_CHARS = 100
# The editor shows a Write's old text beside the new one; a file larger than this is shown as new text only.
MAX_OLD_TEXT_BYTES = 512 * 1024


def text_chunk(text: str) -> AgentMessageChunk:
    return helpers.update_agent_message_text(text)


def notice_text(level: str, text: str) -> str:
    """A ribbit notice inside the agent's message stream: a quoted paragraph of its own."""
    label = "ribbit" if level == "info" else f"ribbit {level}"
    lines = text.splitlines() or [""]
    return "\n\n" + "\n".join(f"> {label}: {lines[0]}" if n == 0 else f"> {line}" for n, line in enumerate(lines)) + "\n\n"


def fenced(text: str, info: str = "") -> str:
    """`text` as a Markdown code block whose fence no line of it can close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def one_line(text: str, limit: int = TITLE_CHARS) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    more = len(text.strip().splitlines()) > 1
    if len(first) > limit:
        return first[: limit - 1] + "…"
    return first + (" …" if more else "")


def absolute(root: Path, file_path: object) -> str | None:
    """The path a tool argument names, absolute (the protocol's locations and diffs are), not resolved."""
    if not isinstance(file_path, str) or not file_path.strip():
        return None
    return os.path.normpath(os.path.join(root, file_path))


def text_in_root(root: Path, path: str) -> str | None:
    """The file's text when it is a regular file inside the root and not too large; else None."""
    try:
        real = Path(path).resolve()
        if not real.is_relative_to(root.resolve()) or not real.is_file():
            return None
        if real.stat().st_size > MAX_OLD_TEXT_BYTES:
            return None
        return real.read_bytes().decode("utf-8", "replace")
    except (OSError, RuntimeError):
        return None


def line_of(text: str | None, fragment: object) -> int | None:
    """1-based line where `fragment` starts in `text`, if it is there."""
    if text is None or not isinstance(fragment, str) or not fragment:
        return None
    at = text.find(fragment)
    return None if at < 0 else text.count("\n", 0, at) + 1


def positive_int(value: object) -> int | None:
    try:
        number = int(value)  # type: ignore[call-overload]  # a model's argument: anything
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


@dataclass
class CallView:
    """What the editor was shown of one call, kept so its result can update it."""

    name: str
    kind: ToolKind
    diff: list[ToolContent] = field(default_factory=list)
    locations: list[ToolCallLocation] = field(default_factory=list)
    rejected: bool = False  # the user said no: the call failed, whatever its result says


@dataclass
class CallTracker:
    """Per session: the calls shown so far (their diffs stay when the result comes)."""

    root: Path
    calls: dict[str, CallView] = field(default_factory=dict)

    def started(self, call: ToolCall, live: bool = True) -> ToolCallStart:
        """`live`: the call is about to run (a Write's old text is the file now); False for a replayed one."""
        args = call.arguments
        kind: ToolKind = KINDS.get(call.name, "other")
        path = absolute(self.root, args.get("file_path"))
        title = call.name
        locations: list[ToolCallLocation] = []
        diff: list[ToolContent] = []
        if call.name == "Bash":
            title = one_line(str(args.get("command", ""))) or "Bash"
        elif call.name == "Glob":
            title = f"Glob {one_line(str(args.get('pattern', '')))}"
            where = absolute(self.root, args.get("path")) or str(self.root)
            locations = [ToolCallLocation(path=where)]
        elif path is not None:
            title = f"{call.name} {os.path.relpath(path, self.root) if path.startswith(str(self.root)) else path}"
            line = positive_int(args.get("offset")) if call.name == "Read" else None
            current = text_in_root(self.root, path) if live and call.name in ("Write", "Edit") else None
            if call.name == "Edit":
                line = line_of(current, args.get("old_string"))
                old, new = args.get("old_string"), args.get("new_string")
                if isinstance(old, str) and isinstance(new, str):
                    diff = [helpers.tool_diff_content(path, new, old)]
            elif call.name == "Write" and isinstance(args.get("content"), str):
                diff = [helpers.tool_diff_content(path, args["content"], current)]
            locations = [ToolCallLocation(path=path, line=line)]
        self.calls[call.id] = CallView(call.name, kind, diff, locations)
        return helpers.start_tool_call(
            call.id, title, kind=kind, status="in_progress", content=diff or None, locations=locations or None,
            raw_input=args,
        )

    def finished(self, tool_call_id: str, name: str, output: str, is_error: bool) -> ToolCallProgress:
        view = self.calls.pop(tool_call_id, None) or CallView(name, KINDS.get(name, "other"))
        is_error = is_error or view.rejected
        status: ToolCallStatus = "failed" if is_error else "completed"
        if view.diff and not is_error:
            # The change as applied: the diff stays; the result (the edited region) beside it.
            content: list[ToolContent] = [*view.diff, helpers.tool_content(helpers.text_block(fenced(output)))]
            return helpers.update_tool_call(tool_call_id, status=status, content=content)
        text = fenced(output, "console" if name == "Bash" else "")
        return helpers.update_tool_call(tool_call_id, status=status, content=[helpers.tool_content(helpers.text_block(text))])


def updates_for(event: AgentEvent, calls: CallTracker, context_size: int) -> list[Update]:
    """The session updates one live agent event becomes (most become none: they are the TUI's status bar)."""
    if isinstance(event, TextDelta):
        return [text_chunk(event.text)] if event.text else []
    if isinstance(event, ReasoningDelta):
        return [helpers.update_agent_thought_text(event.text)] if event.text else []
    if isinstance(event, ToolCallEvent):
        return [calls.started(event.call)]
    if isinstance(event, ToolResultEvent):
        return [calls.finished(event.tool_call_id, event.name, event.output, event.is_error)]
    if isinstance(event, ApprovalEvent):
        if event.decision == "rejected" and event.tool_call_id in calls.calls:
            calls.calls[event.tool_call_id].rejected = True
        return []
    if isinstance(event, NoticeEvent):
        return [text_chunk(notice_text(event.level, event.text))]
    if isinstance(event, ModeChanged):
        return [helpers.update_current_mode(event.mode)]
    if isinstance(event, UsageEvent):
        used = event.prompt_tokens + event.completion_tokens
        return [UsageUpdate(session_update="usage_update", used=used, size=max(context_size, used))]
    if isinstance(event, CompactionEvent) and event.trigger != "manual":
        return [text_chunk(notice_text("info", f"compacted the conversation to fit the context: "
                                                f"{event.before_tokens} → {event.after_tokens} tokens"))]
    return []


def history_updates(messages: list[ChatMessage], calls: CallTracker) -> list[Update]:
    """A saved conversation replayed for session/load: the prompts, the answers, each call and its result."""
    out: list[Update] = []
    for message in messages:
        if message.role == "user":
            out.append(helpers.update_user_message_text(message.content))
        elif message.role == "assistant":
            if message.reasoning_content:
                out.append(helpers.update_agent_thought_text(message.reasoning_content))
            if message.content.strip():
                out.append(text_chunk(message.content))
            for call in message.tool_calls or []:
                out.append(calls.started(call, live=False))
        elif message.role == "tool" and message.tool_call_id:
            is_error = message.content.startswith("Error:")
            out.append(calls.finished(message.tool_call_id, message.name or "", message.content, is_error))
    return out
