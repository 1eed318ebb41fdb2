"""The conversation as the user sees it: messages, streamed Markdown, reasoning, tool cards, notices.

View state only; the conversation itself lives in the agent session. The app calls these methods
(attributes down) from its own thread after draining the agent's events.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rich.console import RenderableType
from rich.markdown import Markdown as RichMarkdown
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static

from agent.session import call_summary
from app.visible import visible, visible_line
from models.chat import ToolCall

FOLDED_LINES = 4


def summarize_call(call: ToolCall) -> str:
    """The one-line form of a call's arguments: the part a reader scans for (its tool says which)."""
    found = call_summary(call)
    if found is None:
        return ", ".join(f"{k}={visible_line(v, 30)}" for k, v in call.arguments.items())
    text = visible_line(found.subject, found.limit)
    return text + (f" ({', '.join(found.extras)})" if found.extras else "")


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(visible(text)), classes="user")


class Notice(Static):
    """Info, warnings and errors from ribbit or the loop; errors look unmistakably different."""

    def __init__(self, text: str, level: str = "info") -> None:
        mark = {"error": "✗ ", "warning": "! ", "info": ""}.get(level, "")
        super().__init__(Text(mark + visible(text)), classes=f"notice {level}")
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
        first = len(lines) - len(kept)  # the first kept line's index (kept[0] may be its cut tail)
        fence: int | None = None  # the index of the fence open at the first kept line
        for index, line in enumerate(lines[: first + 1]):
            if line.lstrip().startswith(FENCES):
                fence = None if fence is not None else index
        if fence is not None and fence < first:  # an opening line that is itself kept is not repeated
            kept.insert(0, lines[fence])
    return "\n".join(kept)


PIECE_LINES = 30  # a code fence is settled in pieces of at most this many lines


def block_pieces(block: str, max_lines: int = PIECE_LINES) -> list[str]:
    """A finished block as pieces that each render quickly (Pygments takes about 0.2 ms a line here).

    A code fence longer than `max_lines` is cut into fences of the same language, drawn with no gap
    between them; prose is never cut, since Markdown reflows a paragraph's lines.
    """
    lines = block.split("\n")
    if len(lines) <= max_lines:
        return [block]
    pieces: list[str] = []
    current: list[str] = []
    fence: str | None = None
    for line in lines:
        if line.lstrip().startswith(FENCES):
            fence = None if fence is not None else line
        elif fence is not None and len(current) >= max_lines:
            pieces.append("\n".join([*current, fence.lstrip()[:3]]))
            current = [fence]
        current.append(line)
    pieces.append("\n".join(current))
    return pieces


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


class LineWidget(Widget):
    """A widget that draws lines it rendered itself (and keeps): subclasses say which, per width.

    By default the lines are rebuilt only when `lines_key` changes; widgets that grow (the
    assistant's text, the live panel) override `lines_for` with their own incremental cache.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines: list[Strip] = []
        self._built_for: object = None

    def lines_key(self, width: int) -> object:
        """Everything the lines depend on, the width included: a change rebuilds them."""
        return width

    def build_lines(self, width: int) -> list[Strip]:
        raise NotImplementedError

    def lines_for(self, width: int) -> list[Strip]:
        key = self.lines_key(width)
        if width > 0 and key != self._built_for:
            self._lines, self._built_for = self.build_lines(width), key
        return self._lines

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines_for(width))

    def render_line(self, y: int) -> Strip:
        lines = self.lines_for(self.size.width)
        return lines[y] if y < len(lines) else Strip.blank(self.size.width, self.rich_style)


class LivePanel(LineWidget):
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
        self._width = -1
        self._cache: dict[tuple[str, int], list[Strip]] = {}

    def show(self, sources: list[str], markdown: bool = True) -> None:
        """Show the end of `sources` (Markdown blocks, or plain reasoning text)."""
        self._sources, self._markdown = sources, markdown
        before = len(self._lines)
        self._width = -1
        self.lines_for(self.size.width or self.app.size.width)
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

    def lines_for(self, width: int) -> list[Strip]:
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



class AssistantText(LineWidget):
    """Assistant Markdown that grows as deltas arrive: one widget that draws its own lines.

    Finished blocks (paragraphs, lists, fences) are frozen: parsed and rendered to lines once per
    width, then served from that cache. While the turn streams they wait in `unsettled` (the live
    panel shows them); `settle()` queues them for the transcript, and they move in steps of at most
    SETTLE_LINES source lines, one step a frame, so no frame renders a whole long fence at once
    (150 lines of Python took 20-30 ms, in the frame a keystroke was waiting behind). Appending
    lines to one widget only relayouts the transcript's few children; mounting a widget per block
    relayouted hundreds of them.
    """

    DEFAULT_CSS = "AssistantText { height: auto; }"
    SETTLE_LINES = 30
    SETTLE_STEP_S = 0.05

    def __init__(self) -> None:
        super().__init__(classes="assistant")
        self.text_so_far = ""
        self._frozen = 0  # characters of text_so_far already frozen into blocks
        self.unsettled: list[str] = []  # finished blocks' source, not yet queued for the transcript
        self.tail = ""
        self.queued: deque[tuple[str, bool]] = deque()  # (piece source, joined to the piece before)
        self.blocks: list[tuple[RenderableType, bool]] = []  # settled pieces, in order
        self._step: Timer | None = None
        self._width = -1
        self._rendered = 0  # how many of `blocks` are in `_lines`

    async def add(self, text: str) -> None:
        self.text_so_far += visible(text, prose=True)  # the model's words: no escape reaches the terminal
        blocks, tail = split_blocks(self.text_so_far[self._frozen :])
        if blocks:
            self.unsettled.extend(blocks)
            self._frozen = len(self.text_so_far) - len(tail)  # the open tail starts here
        self.tail = tail

    def live(self) -> list[str]:
        queued = [source for source, _ in self.queued]
        return queued + self.unsettled + ([self.tail] if self.tail.strip() else [])

    @property
    def settling(self) -> bool:
        """Pieces are still on their way into the transcript."""
        return bool(self.queued)

    async def settle(self, with_tail: bool = False) -> None:
        """Queue the finished blocks (and the open tail, when the turn is over) for the transcript."""
        moved, self.unsettled = self.unsettled, []
        if with_tail and self.tail.strip():
            moved.append(self.tail)
            self.tail = ""
            self._frozen = len(self.text_so_far)
        for block in moved:
            self.queued.extend((piece, i > 0) for i, piece in enumerate(block_pieces(block)))
        if self._step is None:  # else the pending step takes these too, a frame's worth at a time
            self._settle_step()

    def _settle_step(self) -> None:
        """Move queued pieces in, up to SETTLE_LINES source lines (at least one piece)."""
        self._step = None
        budget = self.SETTLE_LINES
        moved = False
        while self.queued and (budget > 0 or not moved):
            source, joined = self.queued.popleft()
            budget -= source.count("\n") + 1 + len(source) // 200
            self.blocks.append((render_block(source), joined))
            moved = True
        if moved:
            self.refresh(layout=True)
        if self.queued and self.is_attached:
            self._step = self.set_timer(self.SETTLE_STEP_S, self._settle_step)

    def lines_for(self, width: int) -> list[Strip]:
        if width <= 0:
            return []
        if width != self._width:  # a new width: everything is rendered again (a resize, rare)
            self._width, self._lines, self._rendered = width, [], 0
        for renderable, joined in self.blocks[self._rendered :]:
            strips = render_strips(self, renderable, width)
            if self._lines and strips and not joined:
                self._lines.extend(Strip.blank(width, self.rich_style) for _ in range(BLOCK_GAP))
            self._lines.extend(strips)
        self._rendered = len(self.blocks)
        return self._lines


class ReasoningBlock(LineWidget, can_focus=True):
    """The model's thinking: open while it streams, folded to its title line once the turn ends.

    Enter, space or a click opens and folds it. One widget drawing its own lines: a Collapsible is
    four widgets, and composing one at the start of every turn cost two transcript relayouts
    (20-26 ms each late in a session) right when the user may be typing.
    """

    BINDINGS = [Binding("enter,space", "toggle", "Expand", show=False)]
    collapsed: reactive[bool] = reactive(False, layout=True)
    title: reactive[str] = reactive("Thinking…", layout=True)
    DEFAULT_CSS = "ReasoningBlock { height: auto; }"

    def __init__(self) -> None:
        super().__init__(classes="reasoning")
        self.text_so_far = ""
        self._shown = ""  # the text the transcript shows; the live panel shows the rest as it comes

    def add(self, text: str) -> None:
        self.text_so_far += visible(text, prose=True)

    def live(self) -> list[str]:
        return [self.text_so_far.strip("\n")]

    def settle(self) -> None:
        if self._shown != self.text_so_far:
            self._shown = self.text_so_far
            self.refresh(layout=True)

    def finish(self) -> None:
        """Fold to the title line (the text was settled with the rest of the turn)."""
        words = len(self.text_so_far.split())
        self.title = f"Thought ({words} words)"
        self.collapsed = True

    def action_toggle(self) -> None:
        self.collapsed = not self.collapsed

    def on_click(self) -> None:
        self.action_toggle()

    def lines_key(self, width: int) -> object:
        return (width, self.title, self._shown, self.collapsed)

    def build_lines(self, width: int) -> list[Strip]:
        title = Text(("▶ " if self.collapsed else "▼ ") + self.title, style="bold")
        lines = render_strips(self, title, width)
        body = self._shown.strip("\n")
        if not self.collapsed and body:
            lines += render_strips(self, Text(body, style="italic"), width)
        return lines


class ToolCard(LineWidget, can_focus=True):
    """One tool call: tool and arguments on a line; the result folded to a few lines.

    One widget drawing its own lines (colours from its component classes): a container with a
    header and a body widget cost a compose and extra relayouts for every call.
    """

    COMPONENT_CLASSES = {"tool-card--running", "tool-card--done", "tool-card--error", "tool-card--rejected",
                         "tool-card--body"}
    BINDINGS = [Binding("enter,space", "toggle", "Expand", show=False)]
    expanded: reactive[bool] = reactive(False, layout=True)
    DEFAULT_CSS = "ToolCard { height: auto; }"

    def __init__(self, call: ToolCall) -> None:
        super().__init__(classes="tool-card running")
        self.call = call
        self.output: str | None = None
        self.is_error = False
        self.rejected = False  # the user said no: nothing was written or run

    @property
    def state(self) -> str:
        if self.rejected:
            return "rejected"
        return "running" if self.output is None else "error" if self.is_error else "done"

    def header_text(self) -> Text:
        mark = {"running": "…", "done": "✓", "error": "✗", "rejected": "⊘"}[self.state]
        text = Text(style=self.get_component_rich_style(f"tool-card--{self.state}", partial=True))
        text.append(f"{mark} {visible(self.call.name, one_line=True)}", style="bold")
        text.append("  " + summarize_call(self.call))
        if self.rejected:
            text.append("  rejected", style="italic")
        return text

    def body_text(self) -> Text | None:
        if self.output is None:
            return None
        lines = visible(self.output.rstrip("\n")).split("\n") if self.output.strip("\n") else ["(empty)"]
        style = self.get_component_rich_style("tool-card--body", partial=True)
        if self.expanded or len(lines) <= FOLDED_LINES:
            return Text("\n".join(lines), style=style)
        shown = Text("\n".join(lines[:FOLDED_LINES]), style=style)
        shown.append(f"\n… {len(lines) - FOLDED_LINES} more lines (Enter or click to expand)", style="dim italic")
        return shown

    def set_result(self, output: str, is_error: bool) -> None:
        self.output, self.is_error = output, is_error
        self.remove_class("running")
        self.add_class("error" if is_error or self.rejected else "done")
        self.refresh(layout=True)

    def set_rejected(self) -> None:
        self.rejected = True
        self.remove_class("done")
        self.add_class("error")
        self.refresh(layout=True)

    def action_toggle(self) -> None:
        self.expanded = not self.expanded

    def on_click(self) -> None:
        self.action_toggle()

    def lines_key(self, width: int) -> object:
        return (width, self.output, self.expanded, self.rejected)

    def build_lines(self, width: int) -> list[Strip]:
        lines = render_strips(self, self.header_text(), width)
        body = self.body_text()
        if body is not None:
            lines += render_strips(self, body, width)
        return lines


class EarlierEntries(Static):
    """The first line of the transcript while older entries are out of the layout."""

    def show_count(self, hidden: int) -> None:
        self.display = hidden > 0
        self.update(Text(f"↑ {hidden} earlier entries — scroll to the top or click to show more", style="dim italic"))

    def on_click(self) -> None:
        transcript = self.parent
        if isinstance(transcript, Transcript):
            transcript.reveal()


class Transcript(VerticalScroll):
    """Keeps itself scrolled to the bottom while output arrives, unless the user scrolls up.

    At most SHOWN_MAX entries take part in the layout. Every relayout (a settle, a new tool card)
    walks each displayed widget (an entry is one to four), about 25 µs apiece here and twice that
    while llama.cpp holds the cores: 600 entries cost 39 ms a relayout, 120 cost 9. Older entries
    are hidden in batches while the user follows the bottom, and brought back, REVEAL at a time,
    when the user scrolls to the top.

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
    SHOWN_MAX = 40  # a screenful is a dozen entries; scrolling up brings back more
    REVEAL = 20

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
        self.cards: dict[str, ToolCard] = {}
        self.earlier = EarlierEntries("", classes="notice")
        self._hidden: list[Widget] = []  # entries out of the layout, oldest first

    def on_mount(self) -> None:
        self.anchor()
        self.mount(self.earlier)
        self.earlier.display = False
        self.watch(self, "scroll_y", self._scrolled, init=False)

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
        if now - self._settled_at >= self.SETTLE_S and not typing:
            await self.settle()
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

    async def settle(self, final: bool = False) -> None:
        """Move what streamed so far into the transcript (finished blocks; everything when final)."""
        self._settled_at = time.monotonic()
        if self._reasoning is not None:
            self._reasoning.settle()
        if self._text is not None:
            await self._text.settle(with_tail=final)
        if final and self.live is not None:
            self.live.clear()
        elif not final:
            self._show_live()

    async def _write_text(self, text: str) -> None:
        if self._text is None:
            if not text.strip():
                return  # don't open an empty bubble for leading whitespace
            self._text = AssistantText()
            self._append(self._text)
            if self._reasoning is not None:
                self._reasoning.settle()  # the thinking is over: it belongs in the transcript now
            text = text.lstrip("\n")
        await self._text.add(text)

    async def _write_reasoning(self, text: str) -> None:
        if self._reasoning is None:
            if not text.strip():
                return
            self._reasoning = ReasoningBlock()
            self._append(self._reasoning)
        self._reasoning.add(text)

    # -- entries --------------------------------------------------------------------------------

    def _append(self, widget: Widget) -> None:
        """Add an entry at the end without waiting for it to mount.

        These calls come from the app's event drain; awaiting a mount there held the app's message
        queue, keystrokes included, for the mount's frames (40-65 ms at a turn's end, measured).
        The widget is in the DOM at once, so entries keep their order.
        """
        self.mount(widget)
        self._hide_oldest()

    def _hide_oldest(self) -> None:
        """Take the oldest entries out of the layout, a batch at a time, while the user follows the end."""
        if not self.is_vertical_scroll_end:
            return  # the user is reading further up: move nothing under them
        shown = [child for child in self.children if child is not self.earlier and child.display]
        excess = len(shown) - self.SHOWN_MAX
        if excess < self.REVEAL:
            return
        for widget in shown[:excess]:
            widget.display = False
        self._hidden.extend(shown[:excess])
        self.earlier.show_count(len(self._hidden))

    def _scrolled(self, scroll_y: float) -> None:
        if scroll_y <= 0 and self._hidden:
            self.reveal()

    def reveal(self) -> None:
        """Bring back the REVEAL entries just above the first one shown, keeping the view where it is."""
        batch, self._hidden = self._hidden[-self.REVEAL :], self._hidden[: -self.REVEAL]
        height = self.virtual_size.height
        for widget in batch:
            widget.display = True
        self.earlier.show_count(len(self._hidden))

        def keep_view(tries: int = 5) -> None:
            # On a loaded machine the first refresh may come before the layout that counts the batch.
            if self.virtual_size.height == height and tries:
                self.call_after_refresh(keep_view, tries - 1)
                return
            self.scroll_to(y=max(0, self.virtual_size.height - height), animate=False, immediate=True)

        self.call_after_refresh(keep_view)

    async def add_user(self, text: str) -> None:
        await self.end_turn()
        self._append(UserMessage(text))

    async def add_notice(self, text: str, level: str = "info") -> None:
        await self.end_turn()
        self._append(Notice(text, level))

    async def end_turn(self) -> None:
        """The assistant turn is over: freeze its text, fold its reasoning."""
        await self.flush()
        await self.settle(final=True)  # the text's tail and all; the reasoning's last words
        self._text = None
        if self._reasoning is not None:
            self._reasoning.finish()
            self._reasoning = None

    async def add_tool_call(self, call: ToolCall) -> None:
        await self.end_turn()
        card = ToolCard(call)
        self.cards[call.id] = card
        self._append(card)

    def set_tool_result(self, tool_call_id: str, output: str, is_error: bool) -> None:
        card = self.cards.get(tool_call_id)
        if card is not None:
            card.set_result(output, is_error)

    def set_tool_rejected(self, tool_call_id: str) -> None:
        """The user rejected this call's change or command: its card says so, not ✓."""
        card = self.cards.get(tool_call_id)
        if card is not None:
            card.set_rejected()

    async def clear(self) -> None:
        await self.end_turn()
        self.cards.clear()
        self._hidden.clear()
        await self.remove_children()
        self.earlier = EarlierEntries("", classes="notice")
        await self.mount(self.earlier)
        self.earlier.display = False
