"""ribbit's environment variables (`RIBBIT_*`, docs/contract.md), read in one place.

`Settings.read()` takes them from the environment each time it is asked (a test or a caller may pass its
own mapping), so nothing is cached at import. Each field is the variable without its prefix: `threads`
is RIBBIT_THREADS. Values are checked where they are used, so a bad one is named in that line."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel

PREFIX = "RIBBIT_"
OFF = ("off", "0", "no")


def env_name(field: str) -> str:
    """The variable behind a field: "threads" -> "RIBBIT_THREADS"."""
    return PREFIX + field.upper()


def _split(text: str, sep: str) -> list[str]:
    return [part.strip() for part in text.split(sep) if part.strip()]


class Settings(BaseModel):
    model: str = ""  # the model SPEC when --model is not given
    threads: str = ""  # llama.cpp threads when --threads is not given (models.threads checks it)
    llama_amx: bool = False  # "1": keep llama.cpp's AMX and repacked weight buffers (models.llama_runtime)
    sandbox_hide: list[str] = []  # more paths to hide from commands (os.pathsep between them)
    sandbox_expose: list[str] = []  # hidden paths to show again
    sandbox_env: list[str] = []  # more variables a command gets (names or patterns, comma between them)
    sandbox_cgroups: bool = True  # "off": hold a command's caps with rlimits only (agent.sandbox.caps)

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def get(field: str) -> str:
            return env.get(env_name(field), "")

        return cls(
            model=get("model").strip(), threads=get("threads").strip(), llama_amx=get("llama_amx") == "1",
            sandbox_hide=_split(get("sandbox_hide"), os.pathsep), sandbox_expose=_split(get("sandbox_expose"), os.pathsep),
            sandbox_env=_split(get("sandbox_env"), ","), sandbox_cgroups=get("sandbox_cgroups").lower() not in OFF,
        )
