"""Frame pacing for ribbit's screens: draw as soon as something changed, at most FPS frames a second.

Textual paints a screen from an interval timer that is paused between frames. After a frame its
task sleeps to the next tick of a fixed grid, and its skip rule moves that tick one more period on:
a change made just after a frame (a keystroke while the model streams) waits one to two periods,
17-33 ms at Textual's 60 fps, before anything reaches the terminal. That wait was most of the
keystroke-to-screen latency `bench.tui_latency` measured. Paced here, a change is drawn at once when
the last frame is a period old, else when it turns a period old.

This leans on two private Screen methods (`_on_idle`, which resumes the timer, and
`_on_timer_update`, which draws; Textual's own Pilot calls the latter). tests/tui checks that both
still exist, so a Textual upgrade that renames them fails loudly instead of going slow.
"""

from __future__ import annotations

import time

from textual import events
from textual.screen import ModalScreen, Screen, ScreenResultType
from textual.timer import Timer

FPS = 60
PERIOD_S = 1 / FPS


class PacedScreen(Screen[ScreenResultType]):
    """A Screen whose frames are paced by `FPS` alone: no grid, no skipped ticks."""

    _drawn_at = 0.0
    _draw_timer: Timer | None = None

    def _needs_frame(self) -> bool:
        return bool(
            self._layout_required or self._scroll_required or self._repaint_required
            or self._recompose_required or self._dirty_widgets
        )

    async def _on_idle(self, event: events.Idle) -> None:
        # Not dirty: Screen._on_idle runs next (the dispatcher walks the MRO) and runs callbacks.
        if self.is_current and not self.app._batch_count and self._needs_frame():
            event.prevent_default()  # Screen._on_idle would resume its timer
            wait = self._drawn_at + PERIOD_S - time.monotonic()
            if wait <= 0:
                self._draw()
            elif self._draw_timer is None:
                self._draw_timer = self.set_timer(wait, self._draw_due, name="paced frame")

    def _draw_due(self) -> None:
        self._draw_timer = None
        if self.is_current and not self.app._batch_count and self._needs_frame():
            self._draw()

    def _draw(self) -> None:
        self._drawn_at = time.monotonic()
        self._on_timer_update()


class PacedModalScreen(PacedScreen[ScreenResultType], ModalScreen[ScreenResultType]):
    """A ModalScreen paced the same way."""
