"""`python -m bench.context_size` — does the context's allocated size change what a token costs?

    python -m bench.context_size [--model frognano|PATH] [--sizes 4096 16384 131072] [--prompt 2048] [--rounds 3]

A growing context (issue 30) runs a session in a small context that is made larger as it fills, where the
alternative allocates the largest at the start. Whole-session A/B runs on a shared 2-core machine vary by
10-20 % between runs of the same work, so this isolates the one question: one process, one loaded model,
the same `--prompt` random tokens read and 32 decoded after them, in a context of each size in turn (made
by `LlamaRuntime.resize`, as ribbit grows it), the order reversed every other round. Prints per-round
times and medians per size; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench.assets import model_path
from models.llama_runtime import LlamaRuntime

DECODES = 32


def timed_pass(runtime: LlamaRuntime, tokens: list[int], prompt: int) -> tuple[float, float]:
    """Seconds to read `prompt` tokens from an empty cache, and to decode the rest one by one."""
    import llama_cpp

    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(runtime.ctx), True)
    runtime.reset()
    started = time.perf_counter()
    runtime.eval(tokens[:prompt])
    read = time.perf_counter() - started
    started = time.perf_counter()
    for token in tokens[prompt:]:
        runtime.eval([token])
    return read, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.context_size", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="frognano", help="a GGUF or frognano (default)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384, 131072])
    parser.add_argument("--prompt", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import llama_cpp

    runtime = LlamaRuntime(model_path(args.model), n_ctx=min(args.sizes), n_batch=256, n_threads=args.threads,
                           flash_attn=True, type_kv=llama_cpp.GGML_TYPE_F16, n_rs_seq=8)
    rng = random.Random(0)
    tokens = [rng.randrange(1000, min(100_000, runtime.n_vocab())) for _ in range(args.prompt + DECODES)]
    times: dict[int, list[tuple[float, float]]] = {size: [] for size in args.sizes}
    for round_ in range(args.rounds):
        for size in args.sizes if round_ % 2 == 0 else reversed(args.sizes):
            runtime.resize(size)
            read, decode = timed_pass(runtime, tokens, args.prompt)
            times[size].append((read, decode))
            print(f"round {round_ + 1} context {size:>6}: read {args.prompt} tokens {read:6.1f} s, "
                  f"{DECODES} decodes {decode:5.2f} s", flush=True)
    for size, runs in times.items():
        print(f"context {size:>6}: read median {statistics.median(r for r, _ in runs):6.1f} s, "
              f"decode median {statistics.median(d for _, d in runs):5.2f} s ({len(runs)} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
