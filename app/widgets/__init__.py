"""The TUI's widgets: transcript (streamed markdown, tool cards), prompt input with history and
/command hints, status bar, diff view. View state only."""
