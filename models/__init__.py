"""Model backends behind one ChatModel protocol (llama.cpp in-process, openai:, replay:), chat
templates, tool-call dialects (dialects/), grammars, the memory plan and saved states."""
