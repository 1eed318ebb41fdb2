"""One line at the bottom: model, context, step, speed, prompt progress, mode, sandbox, outside edits."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from app.visible import visible


def human_tokens(n: int) -> str:
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def human_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class StatusBar(Static):
    """All fields are reactive view state set by the app; the bar renders them, nothing more."""

    model_name: reactive[str] = reactive("loading model…")
    quantization: reactive[str | None] = reactive(None)
    # llama.cpp threads and why, in a few characters ("2t", "1/2t busy", "4t fixed"); None: not in-process
    threads: reactive[str | None] = reactive(None)
    context_used: reactive[int] = reactive(0)
    context_limit: reactive[int] = reactive(0)
    # Tokens the model's context holds now, where it grows to context_limit (0: all of it)
    context_allocated: reactive[int] = reactive(0)
    step: reactive[int] = reactive(0)
    max_steps: reactive[int] = reactive(150)
    tokens_per_s: reactive[float | None] = reactive(None)
    # (done, total, eta seconds or None) while the model reads its prompt
    prefill: reactive[tuple[int, int, float | None] | None] = reactive(None)
    mode: reactive[str] = reactive("ask")
    # "on" / "off" for a model with a reasoning switch, "" otherwise
    reasoning: reactive[str] = reactive("")
    sandboxed: reactive[bool | None] = reactive(None)
    external_changes: reactive[int] = reactive(0)
    activity: reactive[str] = reactive("")

    def render(self) -> Text:
        # (text, style, priority): where the line is wider than the bar, the lowest priorities go first, so
        # an 80-column terminal still shows the mode and the sandbox (what decides what the agent may do).
        parts: list[tuple[str, str, int]] = []
        model = visible(self.model_name + (f" {self.quantization}" if self.quantization else ""), one_line=True)
        parts.append((model, "bold", KEPT))
        if self.threads:
            parts.append((self.threads, "yellow" if "busy" in self.threads else "", 1))
        if self.context_limit:
            if 0 < self.context_allocated < self.context_limit:
                parts.append((f"ctx {human_tokens(self.context_used)}/{human_tokens(self.context_allocated)} "
                              f"(grows to {human_tokens(self.context_limit)})", "", 5))
            else:
                parts.append((f"ctx {human_tokens(self.context_used)}/{human_tokens(self.context_limit)}", "", 5))
        parts.append((f"step {self.step}/{self.max_steps}", "", 4))
        if self.tokens_per_s is not None:
            parts.append((f"{self.tokens_per_s:.1f} tok/s", "", 2))
        if self.prefill is not None:
            done, total, eta = self.prefill
            pct = 100 * done // total if total else 0
            left = f" ~{human_seconds(eta)} left" if eta is not None else ""
            parts.append((f"reading prompt {pct}% ({done}/{total}){left}", "bold yellow", 7))
        parts.append((f"mode {self.mode}", "bold cyan" if self.mode != "ask" else "", KEPT))
        if self.reasoning:
            parts.append((f"think {self.reasoning}", "" if self.reasoning == "on" else "bold", 3))
        if self.sandboxed is not None:
            parts.append(("sandbox on" if self.sandboxed else "sandbox OFF", "" if self.sandboxed else "bold red", KEPT))
        if self.external_changes:
            parts.append((f"{self.external_changes} changed outside", "bold magenta", 8))
        if self.activity:
            parts.append((self.activity, "italic", 6))
        parts = fit(parts, self.size.width)
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (part, style, _) in enumerate(parts):
            if i:
                text.append(SEPARATOR, style="dim")
            text.append(part, style=style)
        return text


KEPT = 100  # never dropped (the model's name may be shortened instead)
SEPARATOR = " │ "
MINOR = 4  # threads, tok/s, think on/off: the first to go
SHORT_MODEL = 24  # a long model name is cut to this before any field goes
MIN_MODEL = 12


def fit(parts: list[tuple[str, str, int]], width: int) -> list[tuple[str, str, int]]:
    """Make the line fit `width`: drop the figures that matter least (below MINOR), shorten the model's name
    (the first part) to SHORT_MODEL, drop the other parts by priority, shorten the name down to MIN_MODEL,
    then put back, most important first, what fits again; a width of 0 (not laid out yet) keeps all."""
    Indexed = list[tuple[int, tuple[str, str, int]]]

    def length(items: Indexed) -> int:
        return sum(len(p[0]) for _, p in items) + len(SEPARATOR) * max(0, len(items) - 1)

    def drop(items: Indexed, below: int) -> None:
        while length(items) > width:
            droppable = [item for item in items if item[1][2] < below]
            if not droppable:
                return
            items.remove(min(droppable, key=lambda item: item[1][2]))

    def shorten(items: Indexed, floor: int) -> None:
        over = length(items) - width
        index, (name, style, priority) = items[0]
        keep = max(floor, len(name) - over - 1)
        if over > 0 and keep < len(name):
            items[0] = (index, (name[:keep] + "…", style, priority))

    if width <= 0 or not parts:
        return parts
    everything: Indexed = list(enumerate(parts))
    kept = list(everything)
    drop(kept, MINOR)
    shorten(kept, SHORT_MODEL)
    drop(kept, KEPT)
    shorten(kept, MIN_MODEL)
    # A part dropped for room may fit again where a less important one went after it.
    present = {index for index, _ in kept}
    for item in sorted((i for i in everything if i[0] not in present), key=lambda item: -item[1][2]):
        trial = sorted([*kept, item])
        if length(trial) <= width:
            kept = trial
    whole = [(0, parts[0]), *kept[1:]]
    return [part for _, part in (whole if length(whole) <= width else kept)]
