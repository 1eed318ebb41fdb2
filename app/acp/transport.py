"""Newline-delimited JSON-RPC on a pair of file descriptors, as the SDK's `Transport` (acp._transport).

The SDK's own stdio transport drops a line that is not JSON with a logged traceback and no answer; an
editor then waits for a reply that never comes. Here every line that is not a JSON-RPC message gets the
protocol's error (-32700 parse error, -32600 invalid request, with `id` null where none could be read),
and reading runs in a thread, so standard input may be a pipe, a file or a terminal alike.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, BinaryIO

# One message may carry a whole file an editor embeds; the SDK's own limit is the same 50 MB.
MAX_LINE_BYTES = 50 * 1024 * 1024
PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def error_reply(code: int, message: str, request_id: Any = None, details: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["data"] = {"details": details}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def checked(line: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(message, None) for a JSON-RPC message, else (None, the error reply to send)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return None, error_reply(PARSE_ERROR, "Parse error", details=f"not JSON: {str(exc)[:200]}")
    if not isinstance(message, dict):
        return None, error_reply(INVALID_REQUEST, "Invalid request", details="a JSON-RPC message is a JSON object")
    request_id = message.get("id")
    if request_id is not None and not isinstance(request_id, (str, int)):
        return None, error_reply(INVALID_REQUEST, "Invalid request", details="id must be a string or a number")
    if "method" in message:
        if not isinstance(message["method"], str):
            return None, error_reply(INVALID_REQUEST, "Invalid request", request_id, "method must be a string")
        return message, None
    if "id" in message and ("result" in message or "error" in message):
        return message, None  # a reply to one of our requests
    return None, error_reply(INVALID_REQUEST, "Invalid request", request_id, "neither a request nor a reply")


class StdioTransport:
    """Messages in from `source` (read by a daemon thread), out to `sink`; `receive` returns None at end of
    input. A write that fails (the editor went away) ends input too, so the server shuts down."""

    def __init__(self, source: BinaryIO, sink: BinaryIO) -> None:
        self.source = source
        self.sink = sink
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._write_lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._read, name="acp-stdin", daemon=True).start()

    def _read(self) -> None:
        put = self._put
        try:
            while True:
                line = self.source.readline(MAX_LINE_BYTES)
                if not line:
                    break
                if len(line) >= MAX_LINE_BYTES and not line.endswith(b"\n"):
                    while (rest := self.source.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                        pass  # skip the rest of an oversized line; it is answered as a parse error
                    line = b"\x00"
                put(line)
        except (OSError, ValueError):
            pass
        finally:
            put(None)

    def _put(self, item: bytes | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._lines.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is gone already
            pass

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._lines.get()
            if line is None:
                return None
            if not line.strip():
                continue
            message, error = checked(line)
            if error is not None:
                await self.send(error)
                continue
            return message

    async def send(self, message: dict[str, Any]) -> None:
        """Written at once, whole and in order (no await before the write: replies keep their order)."""
        self.write(message)

    def write(self, message: dict[str, Any]) -> None:
        """One message, whole, from any thread (the agent's updates are written where they happen)."""
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace") + b"\n"  # a lone surrogate: ?
        with self._write_lock:
            if self.closed:
                raise ConnectionError("the editor closed the connection")
            try:
                self.sink.write(data)
                self.sink.flush()
            except (OSError, ValueError) as exc:
                self.closed = True
                self._put(None)
                raise ConnectionError(f"cannot write to the editor: {exc}") from None

    def end(self) -> None:
        """End input as if the editor closed it (a signal to stop): the server shuts down cleanly."""
        self._put(None)

    async def close(self) -> None:
        self.closed = True
