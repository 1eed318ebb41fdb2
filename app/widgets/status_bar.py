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
        parts: list[tuple[str, str]] = []
        model = visible(self.model_name + (f" {self.quantization}" if self.quantization else ""), one_line=True)
        parts.append((model, "bold"))
        if self.threads:
            parts.append((self.threads, "yellow" if "busy" in self.threads else ""))
        if self.context_limit:
            if 0 < self.context_allocated < self.context_limit:
                parts.append((f"ctx {human_tokens(self.context_used)}/{human_tokens(self.context_allocated)} "
                              f"(grows to {human_tokens(self.context_limit)})", ""))
            else:
                parts.append((f"ctx {human_tokens(self.context_used)}/{human_tokens(self.context_limit)}", ""))
        parts.append((f"step {self.step}/{self.max_steps}", ""))
        if self.tokens_per_s is not None:
            parts.append((f"{self.tokens_per_s:.1f} tok/s", ""))
        if self.prefill is not None:
            done, total, eta = self.prefill
            pct = 100 * done // total if total else 0
            left = f" ~{human_seconds(eta)} left" if eta is not None else ""
            parts.append((f"reading prompt {pct}% ({done}/{total}){left}", "bold yellow"))
        parts.append((f"mode {self.mode}", "bold cyan" if self.mode != "ask" else ""))
        if self.reasoning:
            parts.append((f"think {self.reasoning}", "" if self.reasoning == "on" else "bold"))
        if self.sandboxed is not None:
            parts.append(("sandbox on" if self.sandboxed else "sandbox OFF", "" if self.sandboxed else "bold red"))
        if self.external_changes:
            parts.append((f"{self.external_changes} changed outside", "bold magenta"))
        if self.activity:
            parts.append((self.activity, "italic"))
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (part, style) in enumerate(parts):
            if i:
                text.append(" │ ", style="dim")
            text.append(part, style=style)
        return text
