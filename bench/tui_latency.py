"""Keystroke-to-screen latency of the real TUI while the model streams.

    python -m bench.tui_latency [--delays 0,0.02,0.005] [--models default] [--presses 40] [--json FILE]

Runs the TUI on a pseudo-terminal (the real Linux driver, real escape sequences), in a fixture git
repo, while a model streams:
- `--delays`: a `replay:` model streaming long Markdown at a fixed pace (`delay` seconds per token;
  0 = no model output, the idle baseline). This isolates the UI's own cost per token.
- `--models`: a real GGUF run in-process by llama.cpp (`default` = the embedded SmolLM2), the way a
  user runs ribbit: its decode threads compete with the UI for the cores. Its one turn is kept
  going (each time the model stops it is asked to continue) until the presses are done.
While it streams, the bench types characters into the prompt, one at a time at irregular intervals,
and times each from the moment its bytes are written to the terminal until the app's output
contains that character drawn on screen. Every press uses a character that occurs nowhere else on
the screen (Greek and Cyrillic letters; the streamed text is ASCII), so the first output holding it
is the frame that shows it.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import pty
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKERS = [chr(c) for c in range(0x03B1, 0x03CA) if c != 0x03C2] + [chr(c) for c in range(0x0430, 0x0450)]
BUDGET_MS = 50.0
LIVE_MODEL_NAME = "latency-bench"
LIVE_TASK = "Write a long, detailed tutorial on Python decorators, with many code examples. Do not use tools."


def markdown_stream(words: int = 3000, seed: int = 7) -> str:
    """Long, realistic assistant output: reasoning first, then Markdown with headings, lists, emphasis,
    short code fences and now and then a whole file in one fence (the costliest block to render)."""
    rnd = random.Random(seed)
    vocab = "the parser returns a list of tokens so we check each branch before calling apply on it".split()
    thinking = " ".join(rnd.choice(vocab) for _ in range(600))
    out, n, step = [f"<think>\n{thinking}.\n</think>\n"], 0, 0
    while n < words:
        if len(out) % 6 == 5:
            body = "\n".join(f"    total += apply(item_{i}, tokens[{i}])  # branch {i}" for i in range(150))
            out.append(f"\nThe whole module:\n\n```python\ndef run(tokens):\n    total = 0\n{body}\n    return total\n```\n")
            n += 1200
        step += 1
        out.append(f"\n## Step {step}\n\n")
        for _ in range(3):
            sentence = " ".join(rnd.choice(vocab) for _ in range(14))
            out.append(f"- **{sentence[:10]}** {sentence[10:]}.\n")
            n += 15
        out.append("\n```python\ndef check(items):\n    return [i for i in items if i]\n```\n\n")
        para = " ".join(rnd.choice(vocab) for _ in range(60))
        out.append(para.capitalize() + ".\n")
        n += 80
    return "".join(out)


def make_repo(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=b@b", "-c", "user.name=bench", "commit", "-qm", "init"], check=True
    )
    return repo


def replay_spec(folder: Path, delay: float, history: int = 0, turns: int = 12) -> str:
    """`history` short steps (a late session's transcript), then turns of long output; every turn
    ends in a Glob call (no approval needed) so the agent goes on."""
    replay = folder / "bench.jsonl"
    glob = "<tool_call>\n<function=Glob>\n<parameter=pattern>\n*.py\n</parameter>\n</function>\n</tool_call>"
    short = [f"<think>\nLook again ({i}).\n</think>\nChecking the files ({i}).\n{glob}" for i in range(history)]
    texts = short + [markdown_stream(seed=turn) + "\n" + glob for turn in range(turns)] if delay > 0 else ["Ready."]
    replay.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return f"replay:{replay}" + (f"#delay={delay}" if delay > 0 else "")


class EndlessTurn:
    """A real model whose one assistant turn goes on: whenever it stops, it is asked to continue.

    Bench only: it keeps llama.cpp decoding (and competing for the cores) for as long as keys are
    timed. Everything else (context, preload, info) is the wrapped model's. When the stream ends,
    the time and token count go to `report` so the bench can tell which presses it overlapped.
    """

    def __init__(self, inner: Any, tokens: int, report: Path) -> None:
        self.inner, self.tokens, self.report = inner, tokens, report
        self.info = inner.info.model_copy(update={"name": LIVE_MODEL_NAME})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, request: Any) -> Any:
        from models.base import TextChunk, TurnEnd
        from models.chat import ChatMessage

        messages, produced, decode_s = list(request.messages), 0, 0.0
        while True:
            text: list[str] = []
            for chunk in self.inner.generate(dataclasses.replace(request, messages=messages)):
                if isinstance(chunk, TurnEnd):
                    break
                if isinstance(chunk, TextChunk):
                    text.append(chunk.text)
                yield chunk
            produced += chunk.usage.completion_tokens
            decode_s += chunk.usage.decode_s
            if chunk.finish_reason != "stop" or produced >= self.tokens:
                break
            messages += [ChatMessage(role="assistant", content="".join(text)), ChatMessage(role="user", content="Go on.")]
            yield TextChunk("\n\n")
        self.report.write_text(json.dumps({"ended_at": time.perf_counter(), "tokens": produced, "decode_s": decode_s}))
        yield chunk


def serve(repo: str, spec: str, report: str, history: str = "0") -> int:
    """The pty child for `--models`: the real app on the real model, kept streaming.

    With `history`, the transcript first gets that many finished steps (reasoning, text, a tool
    card each), drawn as a late session's would be; the model's context is not touched.
    """
    from app.app import AppConfig, RibbitApp
    from models.chat import ToolCall
    from models.backends import load_model

    class LateSessionApp(RibbitApp):
        async def _start(self) -> None:
            transcript = self.main.transcript
            for i in range(int(history)):
                await transcript.stream_reasoning(f"Look again ({i}).")
                await transcript.stream_text(f"Checking the files ({i}).")
                call = ToolCall(id=f"h{i}", name="Glob", arguments={"pattern": "*.py"})
                await transcript.add_tool_call(call)
                transcript.set_tool_result(call.id, "calc.py", False)
            await super()._start()

    model = EndlessTurn(load_model(spec, context=8192), tokens=100_000, report=Path(report))
    return LateSessionApp(AppConfig(repo=Path(repo), model=model, no_sandbox=True)).run() or 0


class Terminal:
    """The app on a pty; a thread drains its output and finds the frames we wait for."""

    def __init__(self, argv: list[str], env: dict[str, str], size: tuple[int, int]) -> None:
        self.master, slave = pty.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, start_new_session=True,
        )
        os.close(slave)
        self.lock = threading.Condition()
        self.tail = b""
        self.total = 0
        self.waiting: bytes | None = None
        self.seen_at: float | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 1 << 16)
            except OSError:
                chunk = b""
            now = time.perf_counter()
            with self.lock:
                if not chunk:
                    self.tail = b"\0EOF"
                    self.lock.notify_all()
                    return
                window = self.tail + chunk
                self.total += len(chunk)
                if self.waiting is not None and self.seen_at is None and self.waiting in window:
                    self.seen_at = now
                self.tail = window[-4096:]
                self.lock.notify_all()

    def wait_for(self, needle: bytes, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while needle not in self.tail:
                if self.tail.endswith(b"\0EOF") or time.monotonic() > deadline:
                    raise SystemExit(f"the app never showed {needle!r}")
                self.lock.wait(0.05)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def press_and_time(self, char: str, timeout: float = 5.0) -> float:
        """Milliseconds from writing `char` to the first output that draws it."""
        with self.lock:
            self.waiting, self.seen_at = char.encode(), None
        t0 = time.perf_counter()
        os.write(self.master, char.encode())
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.seen_at is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the keystroke {char!r} never reached the screen")
                self.lock.wait(0.01)
            seen = self.seen_at
            self.waiting = None
        return (seen - t0) * 1000

    def close(self) -> None:
        try:
            os.write(self.master, b"\x03")
            time.sleep(0.1)
            os.write(self.master, b"\x03")
            self.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        os.close(self.master)


@dataclasses.dataclass(frozen=True)
class Stream:
    """What streams while keys are timed: a paced replay (`delay` s a token; 0 = idle) or a real model."""

    delay: float = 0.0
    model: str | None = None
    history: int = 0  # finished steps before the stream: a late session's transcript

    @property
    def label(self) -> str:
        late = f", {self.history} steps in" if self.history else ""
        if self.model is not None:
            return f"{self.model} (llama.cpp){late}"
        return (f"{1 / self.delay:g} tok/s" if self.delay else "idle") + late


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def measure(
    stream: Stream, presses: int, size: tuple[int, int], seed: int, gap: tuple[float, float] = (0.08, 0.25)
) -> dict[str, object]:
    folder = Path(tempfile.mkdtemp(prefix="ribbit-latency-"))
    report = folder / "stream.json"
    try:
        repo = make_repo(folder)
        env = dict(
            os.environ, TERM="xterm-256color", XDG_STATE_HOME=str(folder / "state"), PYTHONPATH=str(ROOT),
            COLORTERM="truecolor",
        )
        if stream.model is not None:
            argv = [
                sys.executable, "-m", "bench.tui_latency", "--serve", str(repo), stream.model, str(report),
                str(stream.history),
            ]
            ready, task, streaming = LIVE_MODEL_NAME.encode(), LIVE_TASK, b"tok/s"
        else:
            spec = replay_spec(folder, stream.delay, stream.history)
            argv = [sys.executable, "-m", "app.cli", "--repo", str(repo), "--model", spec, "--no-sandbox"]
            ready, task = b"bench.jsonl", "explain the parser"
            streaming = b"Step 1" if stream.delay else b"Ready."  # the long output's first heading
        term = Terminal(argv, env, size)
        try:
            term.wait_for(ready, timeout=300)  # the status bar names the model once the session is open
            term.type(task + "\r")
            term.wait_for(streaming, timeout=300)
            time.sleep(0.5)  # let streaming settle into its steady state
            rnd = random.Random(seed)
            samples, pressed_at = [], []
            for i in range(presses):
                time.sleep(rnd.uniform(*gap))
                pressed_at.append(time.perf_counter())
                samples.append(term.press_and_time(MARKERS[i % len(MARKERS)]))
            finished = time.perf_counter()
            load = os.getloadavg()[0]
        finally:
            term.close()
        streamed = json.loads(report.read_text()) if report.exists() else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ordered = sorted(samples)
    result: dict[str, object] = {
        "stream": stream.label,
        "delay_s": stream.delay,
        "model": stream.model,
        "presses": len(samples),
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(percentile(ordered, 0.95), 1),
        "p99_ms": round(percentile(ordered, 0.99), 1),
        "max_ms": round(ordered[-1], 1),
        "mean_ms": round(statistics.fmean(ordered), 1),
        "load_1min": round(load, 2),
        "samples_ms": [round(s, 2) for s in samples],
    }
    if stream.model is not None:
        # A real model's stream must have outlasted the presses, or some were timed on an idle app.
        ended = streamed["ended_at"] if streamed else finished + 1
        result["presses_while_streaming"] = sum(t < ended for t in pressed_at)
        if streamed and streamed["decode_s"]:
            result["model_tok_s"] = round(streamed["tokens"] / streamed["decode_s"], 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tui_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", default="0,0.02,0.005", help="replay streams, seconds per token (0 = idle); '' = none")
    parser.add_argument("--models", default="", help="real models streaming through llama.cpp, e.g. 'default' or a GGUF path")
    parser.add_argument("--history", type=int, default=0, help="streams start after this many finished steps")
    parser.add_argument("--presses", type=int, default=40)
    parser.add_argument("--size", default="120x40", help="terminal COLSxROWS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--gap", default="0.08-0.25",
        help="seconds between presses, MIN-MAX (default: 4-12 keys a second, like a typist; "
        "0.6-1.5 = isolated keys, which the transcript's hold-while-typing never protects)",
    )
    parser.add_argument("--json", default=None, help="also write the results to FILE")
    parser.add_argument("--serve", nargs=4, metavar=("REPO", "SPEC", "REPORT", "HISTORY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(*args.serve)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    low, high = (float(x) for x in args.gap.split("-"))
    streams = [Stream(delay=float(d), history=args.history) for d in args.delays.split(",") if d.strip()]
    streams += [Stream(model=m.strip(), history=args.history) for m in args.models.split(",") if m.strip()]
    results = []
    print(
        f"keystroke-to-screen latency, {cols}x{rows} pty, {args.presses} presses per run, "
        f"{low:g}-{high:g} s apart (budget {BUDGET_MS:.0f} ms for every key)"
    )
    print(f"{'stream':>22} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8} {'load':>5}")
    for stream in streams:
        result = measure(stream, args.presses, (cols, rows), args.seed, (low, high))
        results.append(result)
        extra = ""
        if stream.model is not None:
            extra = f"  model {result.get('model_tok_s', '?')} tok/s, {result['presses_while_streaming']}/{result['presses']} presses while it streamed"
        print(
            f"{result['stream']:>22} {result['p50_ms']:>8} {result['p95_ms']:>8} {result['p99_ms']:>8} "
            f"{result['max_ms']:>8} {result['mean_ms']:>8} {result['load_1min']:>5}{extra}"
        )
    worst = max(float(r["max_ms"]) for r in results)  # type: ignore[arg-type]
    verdict = "within" if worst < BUDGET_MS else "OVER"
    print(f"slowest key {worst:.1f} ms: {verdict} the {BUDGET_MS:.0f} ms budget")
    if args.json:
        record = {"size": [cols, rows], "gap_s": [low, high], "load_avg": os.getloadavg(), "results": results}
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return 0 if worst < BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
