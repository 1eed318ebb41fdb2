"""`python -m bench.context_size` — does the context's allocated size change what a token costs?

    python -m bench.context_size [--model frognano|PATH] [--sizes 4096 16384 131072] [--prompt 2048] [--rounds 3]
                                 [--fresh]

A growing context (issue 30) runs a session in a small context that is made larger as it fills, where the
alternative allocates the largest at the start. Whole-session A/B runs on a shared 2-core machine vary by
10-20 % between runs of the same work, so this isolates the one question: one process, one loaded model,
the same `--prompt` random tokens read and 32 decoded after them, in a context of each size in turn (made
by `LlamaRuntime.resize`, as ribbit grows it), the order reversed every other round. `--fresh`: each pass
in a process of its own whose context is made at that size when the model loads (as a session starts,
small or `bench.session --whole`), for what one process cannot show. Prints per-round times and medians
per size; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
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


def load(args: argparse.Namespace, n_ctx: int) -> LlamaRuntime:
    import llama_cpp

    return LlamaRuntime(model_path(args.model), n_ctx=n_ctx, n_batch=256, n_threads=args.threads,
                        flash_attn=True, type_kv=llama_cpp.GGML_TYPE_F16, n_rs_seq=8)


def tokens_for(runtime: LlamaRuntime, prompt: int) -> list[int]:
    rng = random.Random(0)  # the same tokens in every pass and process
    return [rng.randrange(1000, min(100_000, runtime.n_vocab())) for _ in range(prompt + DECODES)]


def fresh_pass(args: argparse.Namespace, size: int) -> tuple[float, float]:
    """One pass in a child process that loads the model with a context of `size` tokens."""
    code = ("import sys; from bench.context_size import child; child(sys.argv[1:])")
    out = subprocess.run([sys.executable, "-c", code, args.model, str(size), str(args.prompt), str(args.threads)],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[-2]), float(out[-1])


def child(argv: list[str]) -> None:
    model, size, prompt, threads = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    runtime = load(argparse.Namespace(model=model, threads=threads), size)
    read, decode = timed_pass(runtime, tokens_for(runtime, prompt), prompt)
    print(read, decode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.context_size", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="frognano", help="a GGUF or frognano (default)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384, 131072])
    parser.add_argument("--prompt", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="each pass in its own process, the context made at load")
    args = parser.parse_args(argv)
    runtime = None if args.fresh else load(args, min(args.sizes))
    times: dict[int, list[tuple[float, float]]] = {size: [] for size in args.sizes}
    for round_ in range(args.rounds):
        for size in args.sizes if round_ % 2 == 0 else reversed(args.sizes):
            if runtime is None:
                read, decode = fresh_pass(args, size)
            else:
                runtime.resize(size)
                read, decode = timed_pass(runtime, tokens_for(runtime, args.prompt), args.prompt)
            times[size].append((read, decode))
            print(f"round {round_ + 1} context {size:>6}: read {args.prompt} tokens {read:6.1f} s, "
                  f"{DECODES} decodes {decode:5.2f} s", flush=True)
    for size, runs in times.items():
        print(f"context {size:>6}: read median {statistics.median(r for r, _ in runs):6.1f} s, "
              f"decode median {statistics.median(d for _, d in runs):5.2f} s ({len(runs)} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
