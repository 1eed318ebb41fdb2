"""What resume, rewind and compaction cost on a GGUF: a saved conversation state's size on disk, the time to
save it and to load it in a fresh model (a new process's resume), against reading the conversation again;
and a compaction's cost from the measured per-token speeds.

    python -m bench.sessions                                   # the embedded SmolLM2, quick
    python -m bench.sessions --model frognano --tokens 2000 8000   # the synthetic FrogNano of bench.quantize

Each conversation is prefilled once (that time is the re-read a saved state avoids), saved, then loaded
into a second model instance with the same settings; load and re-read are alternated --rounds times and
medians printed. Compaction = writing the summary (decode) + reading task, summary and the latest results
on top of the saved system prompt (prefill), at the speeds measured here.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from agent.core.compaction import ContextBudget
from bench.assets import model_path
from models.base import GenerationRequest, TurnEnd
from models.chat import ChatMessage
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel

FILLER = "def handler_{i}(request):\n    value = request.get('field_{i}', {i})\n    return value * {i} + len(str(value))\n\n"


def conversation(model: LlamaCppModel, tokens: int) -> list[ChatMessage]:
    """A system prompt and one user message of about `tokens` tokens (code-like text)."""
    text, i = "", 0
    while len(model._tokenize(text)) < tokens:  # noqa: SLF001
        text += "".join(FILLER.format(i=i + k) for k in range(20))
        i += 20
    return [ChatMessage(role="system", content="You are a coding agent."), ChatMessage(role="user", content=text)]


def prefill(model: LlamaCppModel, messages: list[ChatMessage], decode: int = 0) -> tuple[float, TurnEnd]:
    started = time.perf_counter()
    end = None
    for chunk in model.generate(GenerationRequest(messages=messages, tools=[], max_tokens=max(1, decode))):
        if isinstance(chunk, TurnEnd):
            end = chunk
    assert end is not None
    return time.perf_counter() - started, end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=model_path, default=None, help="a GGUF, or frognano (bench.quantize's); default: the embedded model")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=int, default=32768, help="context window for the compaction figure")
    args = parser.parse_args()
    path = args.model or embedded_model_path()
    n_ctx = max(args.tokens) + 512
    settings = dict(n_ctx=n_ctx, temperature=0.0, n_threads=args.threads, draft="none", persist_states=False)
    with tempfile.TemporaryDirectory(prefix="ribbit-bench-sessions-") as tmp:
        writer = LlamaCppModel(path, **settings)  # type: ignore[arg-type]
        reader = LlamaCppModel(path, **settings)  # type: ignore[arg-type]
        print(f"model {path.name}, threads {writer.plan.n_threads}, context {n_ctx}")
        try:
            for tokens in args.tokens:
                messages = conversation(writer, tokens)
                writer.reset()
                read_s, end = prefill(writer, messages, decode=33)
                prompt = end.usage.prompt_tokens
                prompt_rate = end.usage.evaluated_tokens / max(end.usage.prefill_s, 1e-9)
                decode_rate = max(1, end.usage.completion_tokens - 1) / max(end.usage.decode_s, 1e-9)
                point = Path(tmp) / f"point-{tokens}.state"
                started = time.perf_counter()
                assert writer.save_point(point)
                save_s = time.perf_counter() - started
                size = point.stat().st_size
                history = messages + [ChatMessage(role="assistant", content="x")]
                loads, rereads = [], []
                for _ in range(args.rounds):  # alternated: the machine is shared and noisy
                    reader.reset()
                    started = time.perf_counter()
                    problem = reader.load_point(point, history)
                    loads.append(time.perf_counter() - started)
                    assert problem is None, problem
                    reader.reset()
                    reader.snapshots.clear()
                    rereads.append(prefill(reader, messages)[0])
                load_s, reread_s = statistics.median(loads), statistics.median(rereads)
                print(f"{prompt:>6} tokens: state {size / 2**20:.1f} MiB ({size / prompt / 1024:.1f} KiB/token); "
                      f"save {save_s:.2f} s, load in a fresh model {load_s:.2f} s vs reading it again {reread_s:.1f} s "
                      f"({reread_s / max(load_s, 1e-9):.0f}x); prompt {prompt_rate:.0f} tok/s, decode {decode_rate:.1f} tok/s")
            budget = ContextBudget(window=args.window, base=1100)
            restart = 1100 + 200 + budget.summary_tokens + budget.results_tokens
            cost = budget.summary_tokens / decode_rate + (restart - 1100) / prompt_rate
            print(f"compaction in a {args.window}-token window: summary up to {budget.summary_tokens} tokens written "
                  f"({budget.summary_tokens / decode_rate:.0f} s at {decode_rate:.1f} tok/s) + restart reading "
                  f"{restart - 1100} tokens on the saved system prompt ({(restart - 1100) / prompt_rate:.0f} s): "
                  f"at most {cost:.0f} s, vs reading {args.window - budget.summary_reserve - budget.turn_reserve} "
                  f"tokens of history again: {(args.window - budget.summary_reserve - budget.turn_reserve) / prompt_rate:.0f} s")
        finally:
            writer.close()
            reader.close()


if __name__ == "__main__":
    main()
