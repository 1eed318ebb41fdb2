"""The TUI's screens: the main one (transcript, prompt, status bar) and the modal ones (edit review,
Bash approval, /diff, the resume and /rewind pickers, a yes/no before the session starts); all paced
so typing stays smooth (pacing)."""
