"""The user's side: the Textual TUI (app.py, screens/, widgets/, the slash-command table in commands.py,
the agent-thread boundary in bridge.py), the command line (cli.py, args.py, run.py, undo_cmd, eval_cmd,
allow_cmd, doctor) and `ribbit acp` for editors (acp/). It uses the agent only through agent.session (and
agent.evaluation for `ribbit eval`); an import-linter contract in pyproject.toml holds it to that."""
