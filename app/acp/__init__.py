"""`ribbit acp`: the Agent Client Protocol (JSON-RPC over stdio) for editors, a second front end on the
session API (agent.session) beside the TUI and `ribbit run`.

server.py     the process: stdout kept for the protocol, the model loaded once, the connection run
transport.py  newline-delimited JSON-RPC on the process's own stdin / stdout, with protocol errors for bad input
agent.py      the ACP Agent: initialize, sessions, modes, prompts, cancel
session.py    one editor session: a Workspace, its ordered update pump, its permission requests
updates.py    agent events and saved conversations as ACP session updates (pure)
prompt.py     an editor's prompt content as the text the model reads
commands.py   the slash commands an editor can offer
"""
