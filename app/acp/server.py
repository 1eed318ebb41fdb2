"""`ribbit acp`: the process. Standard output carries protocol messages and nothing else: the descriptor
is duplicated for the protocol and fd 1 pointed at stderr before anything loads, so a print, a library's
warning or llama.cpp's own C logging cannot slip a line into the stream. Logs go to stderr as one line
each (tracebacks to the crash folder, agent.session.describe)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from concurrent.futures import Future
from contextlib import suppress
from typing import BinaryIO

from agent.session import describe
from app.visible import visible
from models.base import ChatModel, ModelError
from models.embedded import DEMO_LIMITS, EMBEDDED_NAME, is_embedded


class OneLineLog(logging.Handler):
    """A log record as one line on stderr; an exception's traceback goes to the crash folder."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text += ": " + describe(record.exc_info[1])
            sys.stderr.write(f"ribbit acp: {record.levelname.lower()}: {visible(text, one_line=True)}\n")
            sys.stderr.flush()
        except Exception:  # logging must never take the server down
            pass


def protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """(stdin, a private copy of stdout) for the protocol; fd 1 and sys.stdout now write to stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, out


def load_in_background(args: argparse.Namespace) -> Future[ChatModel]:
    """The model, loaded once while the editor initialises (a session waits for it)."""
    from app.args import engine_options
    from models.backends import load_model

    future: Future[ChatModel] = Future()

    def load() -> None:
        try:
            model = load_model(args.model, context=args.context, engine=engine_options(args))
        except (ModelError, OSError) as exc:
            print(f"ribbit acp: error: {visible(str(exc), one_line=True)}", file=sys.stderr)
            future.set_exception(exc)
            return
        except Exception as exc:  # a bug: one line, the traceback in the crash folder
            print(f"ribbit acp: error: the model did not load: {visible(describe(exc), one_line=True)}", file=sys.stderr)
            future.set_exception(ModelError(f"internal error: {exc}"))
            return
        if is_embedded(model.info.path):
            print(f"ribbit acp: note: {EMBEDDED_NAME} is {DEMO_LIMITS}", file=sys.stderr)
        future.set_result(model)

    threading.Thread(target=load, name="ribbit-model-load", daemon=True).start()
    return future


async def serve(args: argparse.Namespace, source: BinaryIO, sink: BinaryIO, version: str) -> None:
    from acp.agent.connection import AgentSideConnection

    from app.acp.agent import RibbitAgent
    from app.acp.transport import StdioTransport

    model = load_in_background(args)
    transport = StdioTransport(source, sink)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with suppress(ValueError, NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, transport.end)
    agent = RibbitAgent(args, model, version, transport.write)
    conn = AgentSideConnection(agent, transport, listening=False)  # type: ignore[arg-type]  # a structural Agent
    try:
        await conn.listen()
    finally:
        await asyncio.to_thread(agent.close)  # the agent threads stop; every journal step is whole
        await conn.close()
        if model.done() and model.exception() is None:  # one still loading is left to the process's exit
            model.result().close()


def acp_main(args: argparse.Namespace, version: str = "unknown") -> int:
    if args.mode == "review":
        print("ribbit acp: error: review mode is not available in an editor; choose ask, auto-edit, full-auto or plan",
              file=sys.stderr)
        return 2
    # llama.cpp's CPU threads are an OpenMP team per calling thread; here the preload and each turn run on
    # worker threads, and a team left spinning (libgomp's default wait) took the cores from the next one:
    # 3-8x slower decoding on a loaded 2-core machine (bench/acp_latency.py). Waiting passively costs a
    # futex wake a token. Read by libgomp when llama.cpp loads, so set before the model loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    source, sink = protocol_streams()
    logging.basicConfig(level=logging.WARNING, handlers=[OneLineLog()], force=True)
    try:
        asyncio.run(serve(args, source, sink, version))
    except KeyboardInterrupt:
        return 130
    finally:
        with suppress(OSError):
            sink.close()
    return 0
