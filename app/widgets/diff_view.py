"""Rendering hunks: syntax-highlighted unified diff, or side by side on wide terminals."""

from __future__ import annotations

from rich.console import RenderableType
from rich.style import Style
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from agent.session import Hunk
from app.visible import visible

ADDED_BG = Style(bgcolor="#0f3d1f")
REMOVED_BG = Style(bgcolor="#4a1416")
NO_NEWLINE = "\\ No newline at end of file"
# Below this many columns the review shows a unified diff.
SIDE_BY_SIDE_MIN_WIDTH = 160


def lexer_for(path: str) -> str:
    return Syntax.guess_lexer(path, code="")


def _body(hunk: Hunk) -> list[tuple[str, str, bool]]:
    """(prefix, code, followed by 'no newline' marker) for each body line."""
    out = []
    for line in hunk.lines:
        first, _, marker = line.partition("\n")
        out.append((first[:1], visible(first[1:]), marker == NO_NEWLINE))
    return out


def _highlight(codes: list[str], lexer: str) -> list[Text]:
    if not codes:
        return []
    syntax = Syntax("", lexer, theme="ansi_dark")
    text = syntax.highlight("\n".join(codes))
    text.rstrip()
    lines = text.split("\n", allow_blank=True)
    # highlight() may drop a trailing empty line; pad so indices line up.
    while len(lines) < len(codes):
        lines.append(Text(""))
    return lines[: len(codes)]


def _starts(hunk: Hunk) -> tuple[int, int]:
    """1-based first old and new line numbers of the hunk, from its header."""
    try:
        old_part, new_part = hunk.header.split()[1:3]
        old = int(old_part[1:].split(",")[0])
        new = int(new_part[1:].split(",")[0])
    except (ValueError, IndexError):
        return 1, 1
    return max(old, 1), max(new, 1)


def render_unified(hunk: Hunk, lexer: str) -> Text:
    body = _body(hunk)
    highlighted = _highlight([code for _, code, _ in body], lexer)
    old_no, new_no = _starts(hunk)
    out = Text(no_wrap=True)
    out.append(hunk.header, style="bold cyan")
    for (prefix, _, no_newline), code in zip(body, highlighted):
        out.append("\n")
        if prefix == "-":
            numbers, bg, mark = f"{old_no:>4}      ", REMOVED_BG, "-"
            old_no += 1
        elif prefix == "+":
            numbers, bg, mark = f"     {new_no:>4} ", ADDED_BG, "+"
            new_no += 1
        else:
            numbers, bg, mark = f"{old_no:>4} {new_no:>4} ", None, " "
            old_no += 1
            new_no += 1
        out.append(numbers, style="dim")
        line = Text(mark + " ", style="bold green" if mark == "+" else "bold red" if mark == "-" else "")
        line.append_text(code)
        if bg is not None:
            line.stylize(bg)
        out.append_text(line)
        if no_newline:
            out.append("\n          " + NO_NEWLINE, style="dim italic")
    return out


def render_split(hunk: Hunk, lexer: str) -> Table:
    """Old on the left, new on the right; removed and added lines of one change face each other."""
    body = _body(hunk)
    old_lines = [code for prefix, code, _ in body if prefix != "+"]
    new_lines = [code for prefix, code, _ in body if prefix != "-"]
    old_hl = iter(_highlight(old_lines, lexer))
    new_hl = iter(_highlight(new_lines, lexer))
    old_no, new_no = _starts(hunk)
    table = Table.grid(expand=True, padding=(0, 1))
    table.add_column(justify="right", style="dim", width=4)
    table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_column(justify="right", style="dim", width=4)
    table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_row("", Text(hunk.header, style="bold cyan"), "", "")
    i = 0
    while i < len(body):
        prefix = body[i][0]
        if prefix == " ":
            left, right = next(old_hl), next(new_hl)
            table.add_row(str(old_no), Text("  ").append_text(left), str(new_no), Text("  ").append_text(right))
            old_no += 1
            new_no += 1
            i += 1
            continue
        removed, added = [], []
        while i < len(body) and body[i][0] == "-":
            removed.append(next(old_hl))
            i += 1
        while i < len(body) and body[i][0] == "+":
            added.append(next(new_hl))
            i += 1
        for j in range(max(len(removed), len(added))):
            table.add_row(*_half(removed, j, old_no, "- ", "bold red", REMOVED_BG),
                          *_half(added, j, new_no, "+ ", "bold green", ADDED_BG))
            old_no += j < len(removed)
            new_no += j < len(added)
    return table


def _half(lines: list[Text], j: int, number: int, mark: str, style: str, bg: Style) -> list[RenderableType]:
    """One side of a changed row: its number and marked line, or two empty cells past that side's last line."""
    if j >= len(lines):
        return ["", ""]
    cell = Text(mark, style=style).append_text(lines[j])
    cell.stylize(bg)
    return [str(number), cell]


class HunkView(Static):
    """One hunk in the review: highlighted when under the cursor, dimmed when not selected."""

    selected: reactive[bool] = reactive(True)
    current: reactive[bool] = reactive(False)
    side_by_side: reactive[bool] = reactive(False)

    def __init__(self, hunk: Hunk, index: int, total: int, lexer: str) -> None:
        super().__init__(classes="hunk")
        self.hunk = hunk
        self.index = index
        self.total = total
        self.lexer = lexer
        self.border_title = self._title()

    def _title(self) -> str:
        # A checkbox, not a tick: nothing is applied until the review is approved.
        mark = "[x]" if self.selected else "[ ]"
        state = "selected" if self.selected else "skipped"
        return f"{mark} hunk {self.index + 1}/{self.total}  +{self.hunk.added} -{self.hunk.removed}  ({state})"

    def render(self) -> RenderableType:
        return render_split(self.hunk, self.lexer) if self.side_by_side else render_unified(self.hunk, self.lexer)

    def watch_selected(self, selected: bool) -> None:
        self.set_class(not selected, "skipped")
        self.border_title = self._title()

    def watch_current(self, current: bool) -> None:
        self.set_class(current, "current")
