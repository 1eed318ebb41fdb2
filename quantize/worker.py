"""Runs one of quantize's llama.cpp workers (``python -m quantize._NAME_worker``) in a child process.

A child keeps llama.cpp's aborts, its memory and its global log hook away from the caller. A worker
reports on stdout, one line each: ``PROGRESS done total`` (drives the progress bar), ``NOTE text`` (said
to the user as it comes), ``ERROR text`` (the last one is the failure's reason).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from quantize.errors import QuantizeError
from quantize.progress import ProgressBar


def run_worker(
    module: str, args: Sequence[str], *, what: str, about: Path, label: str, unit: str, progress: bool,
    stdin: str = "", say: Callable[[str], None] | None = None,
) -> None:
    """Run ``python -m module args``; QuantizeError("`what` failed: reason", about) when it fails.
    `stdin` is written to the child and closed before its output is read."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    bar: ProgressBar | None = None
    errors: list[str] = []
    # stderr goes to a file: a chatty child can never fill a pipe nobody reads while stdout is read
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err_file, env=env, encoding="utf-8",
                            errors="surrogateescape")  # file names are passed as os.fsdecode gives them
    try:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:  # the child died at start: its stderr says why
            pass
        for line in proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "PROGRESS":
                done, total = (int(x) for x in rest.split())
                if progress:
                    bar = bar or ProgressBar(label, total, unit=unit)
                    bar.set(done)
            elif kind == "NOTE" and rest and say is not None:
                say(rest)
            elif kind == "ERROR" and rest:
                errors.append(rest)
        rc = proc.wait()
        err_file.seek(0)
        stderr = err_file.read()[-4096:].decode("utf-8", "replace")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        err_file.close()
    if rc != 0:
        why = errors[-1] if errors else (stderr.strip().splitlines() or [f"exit status {rc}"])[-1]
        raise QuantizeError(f"{what} failed: {why}", about)
    if bar:
        bar.finish()
