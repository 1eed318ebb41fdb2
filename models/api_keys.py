"""API keys for hosted endpoints: read from the environment once, then kept out of everything else.

A key is taken out of this process's environment when it is first read, so no child process ribbit
starts later (Bash, the tests of `ribbit eval`, git, a server) inherits it; it stays here for later
loads of the same SPEC. `redact` takes every key held here out of a text: the transcript writer, the
eval's reports and the openai: backend's error messages pass what they write through it.
"""

from __future__ import annotations

import json
import os
import re
import threading

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REDACTED = "[redacted]"
# Shorter "keys" (a local server's `--api-key 1`) are no secret, and replacing them would mangle text.
MIN_SECRET_LENGTH = 6

_lock = threading.Lock()
_taken: dict[str, str] = {}


def take_api_key(name: str) -> str | None:
    """The key in environment variable `name` (None if unset): removed from os.environ, remembered here.

    A value set again later (a new key) replaces the remembered one.
    """
    with _lock:
        value = os.environ.pop(name, None)
        if value is not None and value.strip():
            _taken[name] = value.strip()
        return _taken.get(name)


def redact(text: str) -> str:
    """`text` with every key read so far replaced by [redacted] (also in its JSON-escaped form)."""
    with _lock:
        keys = [k for k in _taken.values() if len(k) >= MIN_SECRET_LENGTH]
    for key in keys:
        for form in {key, json.dumps(key)[1:-1], json.dumps(key, ensure_ascii=False)[1:-1]}:
            if form in text:
                text = text.replace(form, REDACTED)
    return text


class StreamRedactor:
    """`redact` for text that arrives in pieces: a key split across two pieces is caught too.

    The last few characters (one less than the longest key) wait for the next piece.
    """

    def __init__(self) -> None:
        with _lock:
            self._hold = max((len(k) for k in _taken.values() if len(k) >= MIN_SECRET_LENGTH), default=1) - 1
        self._pending = ""

    def feed(self, text: str) -> str:
        self._pending = redact(self._pending + text)
        if self._hold <= 0:
            out, self._pending = self._pending, ""
            return out
        out, self._pending = self._pending[: -self._hold], self._pending[-self._hold :]
        return out

    def flush(self) -> str:
        out, self._pending = redact(self._pending), ""
        return out
