"""The agent loop: a session drives the model through the five tools (loop, tools/), asking the one
approval orchestrator; prompt, events and transcript. It knows nothing of Textual or llama.cpp."""
