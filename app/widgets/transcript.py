"""The conversation as the user sees it: messages, streamed Markdown, reasoning, tool cards, notices.

View state only; the conversation itself lives in the agent session. The app calls these methods
(attributes down) from its own thread after draining the agent's events.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.reactive import reactive
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from models.chat import ToolCall

FOLDED_LINES = 4


def short(value: object, limit: int = 70) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summarize_call(call: ToolCall) -> str:
    """The one-line form of a call's arguments: the part a reader scans for."""
    args: dict[str, Any] = dict(call.arguments)
    if call.name == "Bash":
        return short(args.get("command", ""))
    if call.name == "Glob":
        where = f" in {args['path']}" if args.get("path") else ""
        return short(str(args.get("pattern", "")) + where)
    if call.name in ("Read", "Write", "Edit"):
        path = str(args.pop("file_path", ""))
        extra = []
        if call.name == "Write":
            extra.append(f"{len(str(args.get('content', '')).splitlines())} lines")
        if call.name == "Edit" and args.get("replace_all"):
            extra.append("replace_all")
        if call.name == "Read":
            extra += [f"{k}={args[k]}" for k in ("offset", "limit") if args.get(k) is not None]
        return path + (f" ({', '.join(extra)})" if extra else "")
    return ", ".join(f"{k}={short(v, 30)}" for k, v in args.items())


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(text), classes="user")


class Notice(Static):
    """Info, warnings and errors from ribbit or the loop; errors look unmistakably different."""

    def __init__(self, text: str, level: str = "info") -> None:
        mark = {"error": "✗ ", "warning": "! ", "info": ""}.get(level, "")
        super().__init__(Text(mark + text), classes=f"notice {level}")
        self.level = level


class AssistantText(Markdown):
    """Markdown that grows as deltas arrive; MarkdownStream batches appends it cannot keep up with."""

    def __init__(self) -> None:
        super().__init__("", classes="assistant")
        self._stream: MarkdownStream | None = None
        self.text_so_far = ""

    async def add(self, text: str) -> None:
        self.text_so_far += text
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        await self._stream.write(text)

    async def finish(self) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None


class ReasoningBlock(Collapsible):
    """The model's thinking: open while it streams, collapsed once the turn ends."""

    def __init__(self) -> None:
        self.body = Static("", classes="reasoning-body")
        super().__init__(self.body, title="Thinking…", collapsed=False, classes="reasoning")
        self.text_so_far = ""

    def add(self, text: str) -> None:
        self.text_so_far += text
        self.body.update(Text(self.text_so_far.strip("\n")))

    def finish(self) -> None:
        words = len(self.text_so_far.split())
        self.title = f"Thought ({words} words)"
        self.collapsed = True


class ToolCard(Vertical, can_focus=True):
    """One tool call: tool and arguments on a line; the result folded to a few lines."""

    BINDINGS = [Binding("enter,space", "toggle", "Expand", show=False)]
    expanded: reactive[bool] = reactive(False)

    def __init__(self, call: ToolCall) -> None:
        super().__init__(classes="tool-card running")
        self.call = call
        self.output: str | None = None
        self.is_error = False
        self.header = Static(self._header_text("…"), classes="tool-header")
        self.body = Static("", classes="tool-body")

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.body

    def _header_text(self, state: str) -> Text:
        text = Text()
        text.append(f"{state} ", style="bold")
        text.append(self.call.name, style="bold")
        text.append("  " + summarize_call(self.call))
        return text

    def set_result(self, output: str, is_error: bool) -> None:
        self.output, self.is_error = output, is_error
        self.remove_class("running")
        self.add_class("error" if is_error else "done")
        self.header.update(self._header_text("✗" if is_error else "✓"))
        self._render_body()

    def watch_expanded(self) -> None:
        self._render_body()

    def action_toggle(self) -> None:
        self.expanded = not self.expanded

    def on_click(self) -> None:
        self.action_toggle()

    def _render_body(self) -> None:
        if self.output is None:
            return
        lines = self.output.rstrip("\n").splitlines() or ["(empty)"]
        if self.expanded or len(lines) <= FOLDED_LINES:
            self.body.update(Text("\n".join(lines)))
            return
        shown = Text("\n".join(lines[:FOLDED_LINES]))
        shown.append(f"\n… {len(lines) - FOLDED_LINES} more lines (Enter or click to expand)", style="dim italic")
        self.body.update(shown)


class Transcript(VerticalScroll):
    """Keeps itself scrolled to the bottom while output arrives, unless the user scrolls up."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._text: AssistantText | None = None
        self._reasoning: ReasoningBlock | None = None
        self.cards: dict[str, ToolCard] = {}

    def on_mount(self) -> None:
        self.anchor()

    # -- entries --------------------------------------------------------------------------------

    async def add_user(self, text: str) -> None:
        await self.end_turn()
        await self.mount(UserMessage(text))

    async def add_notice(self, text: str, level: str = "info") -> None:
        await self.mount(Notice(text, level))

    async def stream_text(self, text: str) -> None:
        if self._text is None:
            if not text.strip():
                return  # don't open an empty bubble for leading whitespace
            self._text = AssistantText()
            await self.mount(self._text)
            text = text.lstrip("\n")
        await self._text.add(text)

    async def stream_reasoning(self, text: str) -> None:
        if self._reasoning is None:
            if not text.strip():
                return
            self._reasoning = ReasoningBlock()
            await self.mount(self._reasoning)
        self._reasoning.add(text)

    async def end_turn(self) -> None:
        """The assistant turn is over: freeze its text, fold its reasoning."""
        if self._text is not None:
            await self._text.finish()
            self._text = None
        if self._reasoning is not None:
            self._reasoning.finish()
            self._reasoning = None

    async def add_tool_call(self, call: ToolCall) -> None:
        await self.end_turn()
        card = ToolCard(call)
        self.cards[call.id] = card
        await self.mount(card)

    def set_tool_result(self, tool_call_id: str, output: str, is_error: bool) -> None:
        card = self.cards.get(tool_call_id)
        if card is not None:
            card.set_result(output, is_error)

    async def clear(self) -> None:
        await self.end_turn()
        self.cards.clear()
        await self.remove_children()
