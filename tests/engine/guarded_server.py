"""`python -m tests.engine.guarded_server ARGS`: llama_cpp.server (the stand-in for an OpenAI-compatible
server on a bigger machine) with ribbit's AMX guard on every model it loads (models.llama_runtime)."""

import runpy

from models.llama_runtime import guard_llama_class

if __name__ == "__main__":
    guard_llama_class()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
