"""Frame pacing for ribbit's screens: draw as soon as something changed, at most FPS frames a second.

Textual paints a screen from an interval timer that is paused between frames. After a frame its
task sleeps to the next tick of a fixed grid, and its skip rule moves that tick one more period on:
a change made just after a frame (a keystroke while the model streams) waits one to two periods,
17-33 ms at Textual's 60 fps, before anything reaches the terminal. That wait was most of the
keystroke-to-screen latency `bench.tui_latency` measured. Paced here, a change is drawn at once when
the last frame is a period old, else when it turns a period old; and a keystroke's frame is drawn at
once even if a streaming repaint has just gone out (keys come a few a second, so this cannot flood).

The app tells the screen about each key (`key_arrived`). This leans on two private Screen methods:
`_on_idle` (it resumes the timer) and `_on_timer_update` (it draws; Textual's own Pilot calls it
too). tests/tui checks that they still exist, so a Textual upgrade that renames them fails loudly
instead of going slow.
"""

from __future__ import annotations

import time

from textual import events
from textual.screen import ModalScreen, Screen, ScreenResultType
from textual.timer import Timer

FPS = 60
PERIOD_S = 1 / FPS
# A key whose frame has not gone out yet is drawn unpaced; after this long it no longer counts
# (a key that changes nothing on screen must not switch pacing off).
KEY_FRAME_WINDOW_S = 0.25


class PacedScreen(Screen[ScreenResultType]):
    """A Screen whose frames are paced by `FPS` alone: no grid, no skipped ticks."""

    _drawn_at = 0.0
    _key_at = 0.0  # when a key arrived whose frame has not been drawn yet; 0 = none
    _draw_timer: Timer | None = None

    def key_arrived(self) -> None:
        """A key is on its way to the focused widget: draw its echo without waiting for the pace."""
        self._key_at = time.monotonic()

    def _needs_frame(self) -> bool:
        return bool(
            self._layout_required or self._scroll_required or self._repaint_required
            or self._recompose_required or self._dirty_widgets
        )

    def _may_draw(self) -> bool:
        return self.is_current and not self.app._batch_count and self._needs_frame()

    async def _on_idle(self, event: events.Idle) -> None:
        # Not dirty: Screen._on_idle runs next (the dispatcher walks the MRO) and runs callbacks.
        if self._may_draw():
            event.prevent_default()  # Screen._on_idle would resume its timer
            now = time.monotonic()
            wait = self._drawn_at + PERIOD_S - now
            if wait <= 0 or now - self._key_at < KEY_FRAME_WINDOW_S:
                self._draw()
            elif self._draw_timer is None:
                self._draw_timer = self.set_timer(wait, self._draw_due, name="paced frame")

    def _draw_due(self) -> None:
        self._draw_timer = None
        if self._may_draw():
            self._draw()

    def _draw(self) -> None:
        if self._key_at and self._shows_input():
            self._key_at = 0.0
        self._drawn_at = time.monotonic()
        self._on_timer_update()

    def _shows_input(self) -> bool:
        """Whether this frame carries the focused widget's change (the key's echo), or a relayout."""
        focused = self.focused
        return self._layout_required or focused is None or focused in self._dirty_widgets


class PacedModalScreen(PacedScreen[ScreenResultType], ModalScreen[ScreenResultType]):
    """A ModalScreen paced the same way."""
