"""The user's side: the Textual TUI (app.py, screens/, widgets/) and the command line (cli.py, run.py,
undo, eval, doctor). It talks to a session only through agent's Workspace API."""
