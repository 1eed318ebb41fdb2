"""Tool-call dialects, one module each: how a model family writes calls and reasoning, and how its
chat template continues a conversation. (Today only `gemma4` lives here; the others follow.)"""
