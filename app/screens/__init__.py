"""The TUI's screens: the main one (transcript, prompt, status bar) and the modal ones (edit review,
Bash approval, /diff); all paced so typing stays smooth."""
