"""The agent loop: a session drives the model through the five tools (loop, tools/), asking the one
approval orchestrator; the prompt and AGENTS.md instructions, events, the streamed turn, compaction and
the tool-output budget. It knows nothing of Textual or llama.cpp."""
