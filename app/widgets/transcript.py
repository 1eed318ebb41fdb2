"""The conversation as the user sees it: messages, streamed Markdown, reasoning, tool cards, notices.

View state only; the conversation itself lives in the agent session. The app calls these methods
(attributes down) from its own thread after draining the agent's events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import RenderableType
from rich.markdown import Markdown as RichMarkdown
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.geometry import Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Collapsible, Static

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


def split_blocks(text: str) -> tuple[list[str], str]:
    """(finished Markdown blocks, the still-open tail): blocks end at blank lines outside code fences."""
    blocks: list[str] = []
    current: list[str] = []
    in_fence = False
    lines = text.split("\n")
    tail_line = lines.pop()  # the last line may still be growing
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        if not line.strip() and not in_fence:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        current.append(line)
    current.append(tail_line)
    return blocks, "\n".join(current)


FENCES = ("```", "~~~")


def preview_source(block: str, rows: int, width: int, markdown: bool = True) -> str:
    """The end of `block`: about enough source for its last `rows` lines at `width` cells.

    The live panel shows only its bottom lines, and Markdown (with Pygments inside fences) costs
    time in proportion to the text: rendering a whole long answer on every flush took 25-50 ms of
    the UI thread while llama.cpp held the cores. A cut inside a code fence keeps the fence's
    opening line, so the code stays highlighted in its language.
    """
    lines = block.split("\n")
    width = max(1, width)
    kept: list[str] = []
    budget = rows
    for line in reversed(lines):
        if budget <= 0:
            break
        cells = -(-len(line) // width) or 1  # rows the line wraps to (at least)
        if cells > budget:
            line = line[-budget * width :]
            cells = budget
        kept.append(line)
        budget -= cells
    if len(kept) == len(lines) and kept[-1] == lines[0]:
        return block
    kept.reverse()
    if markdown:
        fence = None
        for line in lines[: len(lines) - len(kept) + 1]:  # up to and including the first kept line
            if line.lstrip().startswith(FENCES):
                fence = None if fence is not None else line
        if fence is not None and kept[0] is not fence:
            kept.insert(0, fence)
    return "\n".join(kept)


def render_block(block: str) -> RenderableType:
    """One Markdown block as a Rich renderable; headings stay left-aligned, like a terminal reader."""
    stripped = block.lstrip()
    if stripped.startswith("#") and "\n" not in stripped:
        level = len(stripped) - len(stripped.lstrip("#"))
        title = stripped.lstrip("#").strip()
        return Text(title, style="bold underline" if level <= 2 else "bold")
    return RichMarkdown(block, code_theme="ansi_dark", inline_code_theme="ansi_dark", hyperlinks=False)


BLOCK_GAP = 1  # blank lines between Markdown blocks, as in a terminal Markdown reader


def render_strips(widget: Widget, renderable: RenderableType, width: int) -> list[Strip]:
    """`renderable` as lines of exactly `width` cells in the widget's style, without the blank
    lines Rich puts around lists and fences (the gap between blocks is ours to choose)."""
    console = widget.app.console
    options = console.options.update(width=width, min_width=width, max_width=width, height=None)
    rendered = console.render_lines(renderable, options, style=widget.rich_style, pad=True)
    lines = [Strip(line, width) for line in rendered]
    while lines and not lines[0].text.strip():
        lines.pop(0)
    while lines and not lines[-1].text.strip():
        lines.pop()
    return lines


def stack_blocks(blocks: list[list[Strip]], width: int, style: Style) -> list[Strip]:
    """Rendered blocks one under the other, BLOCK_GAP blank lines apart."""
    lines: list[Strip] = []
    for block in blocks:
        if lines and block:
            lines.extend(Strip.blank(width, style) for _ in range(BLOCK_GAP))
        lines.extend(block)
    return lines


class LivePanel(Widget):
    """The last LINES lines of what the model is writing right now, docked above the prompt.

    Streaming repaints only this small fixed region; the transcript above (which would scroll,
    and so redraw entirely) takes the finished blocks over every SETTLE_S or at the turn's end.
    It is given source text and renders only the end of each block (`preview_source`), so a flush
    costs the same however long the answer has grown.
    """

    LINES = 8
    DEFAULT_CSS = "LivePanel { height: auto; display: none; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sources: list[str] = []
        self._markdown = True
        self._lines: list[Strip] = []
        self._width = -1
        self._cache: dict[tuple[str, int], list[Strip]] = {}

    def show(self, sources: list[str], markdown: bool = True) -> None:
        """Show the end of `sources` (Markdown blocks, or plain reasoning text)."""
        self._sources, self._markdown = sources, markdown
        before = len(self._lines)
        self._width = -1
        self._render(self.size.width or self.app.size.width)
        if not self.display:
            self.display = True
        self.refresh(layout=len(self._lines) != before)

    def clear(self) -> None:
        self._sources, self._lines = [], []
        self.display = False

    def _render_source(self, source: str, width: int) -> list[Strip]:
        # Finished blocks do not change between flushes: their previews are kept per width.
        key = (source, width)
        block = self._cache.get(key)
        if block is None:
            preview = preview_source(source, self.LINES, width, self._markdown)
            renderable = render_block(preview) if self._markdown else Text(preview, style="italic dim")
            block = render_strips(self, renderable, width)
        return block

    def _render(self, width: int) -> list[Strip]:
        if width != self._width and width > 0:
            # Only the bottom LINES lines are shown: render from the end, and stop when full.
            blocks: list[list[Strip]] = []
            height = 0
            cache: dict[tuple[str, int], list[Strip]] = {}
            for source in reversed(self._sources):
                block = self._render_source(source, width)
                cache[(source, width)] = block
                blocks.insert(0, block)
                height += len(block) + BLOCK_GAP
                if height >= self.LINES:
                    break
            self._cache = cache
            self._lines = stack_blocks(blocks, width, self.rich_style)[-self.LINES :]
            self._width = width
        return self._lines

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._render(width))

    def render_line(self, y: int) -> Strip:
        lines = self._render(self.size.width)
        return lines[y] if y < len(lines) else Strip.blank(self.size.width, self.rich_style)


class AssistantText(Widget):
    """Assistant Markdown that grows as deltas arrive: one widget that draws its own lines.

    Finished blocks (paragraphs, lists, fences) are frozen: parsed and rendered to lines once per
    width, then served from that cache. While the turn streams they wait in `unsettled` (the live
    panel shows them); `settle()` appends them here. Appending lines to one widget only relayouts
    the transcript's few children; mounting a widget per block relayouted hundreds of them, which
    made the frame a keystroke waits behind 20-40 ms long.
    """

    DEFAULT_CSS = "AssistantText { height: auto; }"

    def __init__(self) -> None:
        super().__init__(classes="assistant")
        self.text_so_far = ""
        self._frozen = 0  # characters of text_so_far already frozen into blocks
        self.unsettled: list[str] = []  # finished blocks' source, not yet in the transcript
        self.tail = ""
        self.blocks: list[RenderableType] = []  # settled, in order; the tail joins them at the end
        self._width = -1
        self._lines: list[Strip] = []
        self._rendered = 0  # how many of `blocks` are in `_lines`

    async def add(self, text: str) -> None:
        self.text_so_far += text
        blocks, tail = split_blocks(self.text_so_far[self._frozen :])
        if blocks:
            self.unsettled.extend(blocks)
            self._frozen = len(self.text_so_far) - len(tail)  # the open tail starts here
        self.tail = tail

    def live(self) -> list[str]:
        return self.unsettled + ([self.tail] if self.tail.strip() else [])

    async def settle(self, with_tail: bool = False, limit: int | None = None) -> None:
        """Take over finished blocks (at most `limit` of them, so one frame stays short)."""
        count = len(self.unsettled) if limit is None or with_tail else limit
        moved, self.unsettled = self.unsettled[:count], self.unsettled[count:]
        if with_tail and self.tail.strip():
            moved.append(self.tail)
            self.tail = ""
            self._frozen = len(self.text_so_far)
        if moved:
            self.blocks.extend(render_block(block) for block in moved)
            self.refresh(layout=True)

    async def finish(self) -> None:
        await self.settle(with_tail=True)

    def _lines_for(self, width: int) -> list[Strip]:
        if width <= 0:
            return []
        if width != self._width:  # a new width: everything is rendered again (a resize, rare)
            self._width, self._lines, self._rendered = width, [], 0
        if self._rendered < len(self.blocks):
            new = [render_strips(self, block, width) for block in self.blocks[self._rendered :]]
            self._lines = stack_blocks([self._lines, *new], width, self.rich_style)
            self._rendered = len(self.blocks)
        return self._lines

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines_for(width))

    def render_line(self, y: int) -> Strip:
        lines = self._lines_for(self.size.width)
        return lines[y] if y < len(lines) else Strip.blank(self.size.width, self.rich_style)


class ReasoningBlock(Collapsible):
    """The model's thinking: open while it streams, collapsed once the turn ends."""

    def __init__(self) -> None:
        self.body = Static("", classes="reasoning-body")
        super().__init__(self.body, title="Thinking…", collapsed=False, classes="reasoning")
        self.text_so_far = ""
        self._shown = ""

    def add(self, text: str) -> None:
        self.text_so_far += text

    def live(self) -> list[str]:
        return [self.text_so_far.strip("\n")]

    def settle(self) -> None:
        if self._shown != self.text_so_far:
            self._shown = self.text_so_far
            self.body.update(Text(self.text_so_far.strip("\n")))

    def finish(self) -> None:
        self.settle()
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
    """Keeps itself scrolled to the bottom while output arrives, unless the user scrolls up.

    Streamed text is buffered and written at most every STREAM_FLUSH_S: one small repaint per
    interval instead of one per token, so the event loop stays free for keystrokes.
    """

    STREAM_FLUSH_S = 0.2
    # Input first: while the user is typing (a key in the last TYPING_QUIET_S), streamed text is
    # held back, up to STREAM_MAX_HOLD_S, because a transcript repaint (it scrolls, so the whole
    # view is redrawn) costs tens of milliseconds and a keystroke would wait behind it.
    TYPING_QUIET_S = 0.5
    STREAM_MAX_HOLD_S = 10.0
    FLUSH_MAX_CHARS = 300
    # How often finished blocks move from the live panel into the (scrolling) transcript.
    SETTLE_S = 4.0
    SETTLE_MAX_BLOCKS = 2

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._text: AssistantText | None = None
        self._reasoning: ReasoningBlock | None = None
        self._pending: list[tuple[str, str]] = []  # ("text" | "reasoning", delta), in order
        self._flush_timer: Timer | None = None
        self._pending_since = 0.0
        self.last_input_at: Callable[[], float] = lambda: 0.0
        self.live: LivePanel | None = None
        self._settled_at = 0.0
        self._settling = False  # a settle is moving a backlog over several ticks
        self.cards: dict[str, ToolCard] = {}

    def on_mount(self) -> None:
        self.anchor()

    # -- streaming ------------------------------------------------------------------------------

    async def stream_text(self, text: str) -> None:
        self._queue("text", text)

    async def stream_reasoning(self, text: str) -> None:
        self._queue("reasoning", text)

    def _queue(self, kind: str, text: str) -> None:
        if self._pending and self._pending[-1][0] == kind:
            self._pending[-1] = (kind, self._pending[-1][1] + text)
        else:
            self._pending.append((kind, text))
        if self._flush_timer is None:
            self._pending_since = time.monotonic()
            self._flush_timer = self.set_timer(self.STREAM_FLUSH_S, self._flush_when_quiet)

    async def _flush_when_quiet(self) -> None:
        self._flush_timer = None
        now = time.monotonic()
        typing = now - self.last_input_at() < self.TYPING_QUIET_S
        if typing and now - self._pending_since < self.STREAM_MAX_HOLD_S:
            self._flush_timer = self.set_timer(self.STREAM_FLUSH_S / 2, self._flush_when_quiet)
            return
        await self.flush(limit=self.FLUSH_MAX_CHARS)
        settling = self._text is not None and self._text.unsettled and self._settling
        if (now - self._settled_at >= self.SETTLE_S or settling) and not typing:
            await self.settle(limit=self.SETTLE_MAX_BLOCKS)
        if self._pending:  # a backlog (after a hold) is caught up over a few frames, not one big one
            self._pending_since = time.monotonic()
            self._flush_timer = self.set_timer(self.STREAM_FLUSH_S, self._flush_when_quiet)

    async def flush(self, limit: int | None = None) -> None:
        """Write buffered deltas (all, or about `limit` characters) before anything else is added."""
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        budget = limit if limit is not None else sum(len(t) for _, t in self._pending)
        while self._pending and budget > 0:
            kind, text = self._pending.pop(0)
            if len(text) > budget:
                text, rest = text[:budget], text[budget:]
                self._pending.insert(0, (kind, rest))
            budget -= len(text)
            if kind == "text":
                await self._write_text(text)
            else:
                await self._write_reasoning(text)
        self._show_live()

    def _show_live(self) -> None:
        if self.live is None:
            return
        if self._text is not None:
            self.live.show(self._text.live())
        elif self._reasoning is not None:
            self.live.show(self._reasoning.live(), markdown=False)

    async def settle(self, final: bool = False, limit: int | None = None) -> None:
        """Move what streamed so far into the transcript (finished blocks; everything when final)."""
        if not self._settling:
            self._settled_at = time.monotonic()
        if self._reasoning is not None:
            self._reasoning.settle()
        if self._text is not None:
            await self._text.settle(with_tail=final, limit=None if final else limit)
            self._settling = bool(self._text.unsettled) and not final
        if final and self.live is not None:
            self.live.clear()
        elif not final:
            self._show_live()

    async def _write_text(self, text: str) -> None:
        if self._text is None:
            if not text.strip():
                return  # don't open an empty bubble for leading whitespace
            self._text = AssistantText()
            await self.mount(self._text)
            if self._reasoning is not None:
                self._reasoning.settle()  # the thinking is over: it belongs in the transcript now
            text = text.lstrip("\n")
        await self._text.add(text)

    async def _write_reasoning(self, text: str) -> None:
        if self._reasoning is None:
            if not text.strip():
                return
            self._reasoning = ReasoningBlock()
            await self.mount(self._reasoning)
        self._reasoning.add(text)

    # -- entries --------------------------------------------------------------------------------

    async def add_user(self, text: str) -> None:
        await self.end_turn()
        await self.mount(UserMessage(text))

    async def add_notice(self, text: str, level: str = "info") -> None:
        await self.end_turn()
        await self.mount(Notice(text, level))

    async def end_turn(self) -> None:
        """The assistant turn is over: freeze its text, fold its reasoning."""
        await self.flush()
        await self.settle(final=True)
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
