"""Model backends behind one ChatModel protocol (llama.cpp in-process, openai:, replay:) and the registry
every SPEC goes through (backends), ribbit's RIBBIT_* settings, the embedded demo model, chat templates,
tool-call dialects (dialects/), grammars, lookup drafting, the memory plan and saved states."""
