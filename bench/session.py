"""`python -m bench.session` — a whole recorded task at FrogNano's real size, teacher-forced.

The recorded session (bench/sessions/ribbit-fix.jsonl, made by `python -m bench.record_session`: 20
steps of Glob/Read/Edit/Bash with real tool outputs on a copy of this repository) is replayed through
the FrogNano-shaped Q4_K_M from `bench.quantize` (built into ribbit's cache, `$XDG_CACHE_HOME/ribbit/bench`,
when missing, reused after). The token stream is built as FrogNano's template writes it (tools in the system turn,
Qwen3-Coder XML calls, tool results in `<tool_response>`). Each step: the new prompt tokens are
evaluated (prompt processing), then the recorded assistant turn is *teacher-forced*: each of its
tokens is treated as the sampled one, the lookup drafter proposes what follows it, the batch is
verified and whatever does not match the recording is rolled back — so prefill, decode, drafting and
rollback costs are real. Tools + harness time is the wall time of replaying the same turns through
`ribbit run` with the real tools (the model answering instantly). Prints figures; asserts nothing.

    python -m bench.session [--gguf PATH|default] [--steps N] [--no-draft] [--whole] [--free-gib G]

The context is planned as `ribbit run` plans it (131,072 where memory allows) and grows from the
planner's start as ribbit's backend grows it; each growth is printed with its cost (`--whole`: the largest
allocated at the start, for comparison). `--free-gib 5` plans as on an 8 GB laptop.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.assets import frognano_gguf
from models.drafting import DEPTH_BAND, MAX_DRAFT, PRIOR_COST, DraftBudget, LookupDrafter, VerifyCost

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "bench" / "sessions" / "ribbit-fix.jsonl"
MODEL = frognano_gguf()


def ensure_model(path: Path) -> Path:
    if str(path) == "default":  # the embedded model as ribbit runs it (its Q8_0 copy)
        from models.embedded import embedded_model_path

        return embedded_model_path()
    if path.is_file():
        return path
    print(f"building {path} with bench.quantize (convert + Q4_K_M: ~10-20 minutes on 2 cores)", flush=True)
    subprocess.run([sys.executable, "-m", "bench.quantize", "--out", str(path.parent)], check=True, cwd=ROOT)
    return path


def load_session(path: Path) -> tuple[dict, list[dict]]:
    lines = path.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def render_steps(header: dict, messages: list[dict]) -> tuple[str, list[tuple[str, str]]]:
    """(the prompt before the first assistant turn, [(assistant raw text, the prompt that follows it)])
    in FrogNano's chat format (Qwen3.5: ChatML, `<tools>` in the system turn, XML tool calls)."""
    from agent.core.tools import default_tools

    tools = "\n".join(json.dumps(t.spec().to_openai(), ensure_ascii=False) for t in default_tools().values())
    system = next(m["content"] for m in messages if m["role"] == "system")
    opening = "<|im_start|>assistant\n<think>\n"
    head = (f"<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n{tools}\n</tools>\n\n"
            f"{system}<|im_end|>\n<|im_start|>user\n{header['task']}<|im_end|>\n{opening}")
    steps: list[tuple[str, str]] = []
    raw = header["assistant_raw"]
    results: list[list[str]] = []
    for message in messages:
        if message["role"] == "assistant":
            results.append([])
        elif message["role"] == "tool" and results:
            results[-1].append(message["content"])
    for index, text in enumerate(raw):
        outputs = results[index] if index < len(results) else []
        follow = "<|im_end|>\n"
        if outputs:
            follow += "<|im_start|>user\n" + "".join(f"<tool_response>\n{o}\n</tool_response>\n" for o in outputs)
            follow += "<|im_end|>\n" + opening
        steps.append((text, follow))
    return head, steps


def offline_acceptance(stream: list[int], spans: list[tuple[int, int]], k: int,
                       curves: list[list[float]]) -> tuple[int, int, int, list[float]]:
    """Lookup drafts of up to k tokens at every step of the recorded assistant spans, checked against
    the recording itself (no model needed): (drafted, accepted, decodes, cost in single-token decodes
    under each verify-cost curve)."""
    import numpy as np

    drafter = LookupDrafter()
    array = np.array(stream, dtype=np.intc)
    drafted = accepted = batches = 0
    costs = [0.0 for _ in curves]
    for start, end in spans:
        i = start
        while i < end:
            drafts = drafter.propose(array[:i], int(array[i]), min(k, end - i - 1))
            ok = 0
            for d, truth in zip(drafts, stream[i + 1 : end]):
                if d != truth:
                    break
                ok += 1
            drafted += len(drafts)
            accepted += ok
            batches += 1
            costs = [c + curve[len(drafts)] for c, curve in zip(costs, curves)]
            i += 1 + ok
    return drafted, accepted, batches, costs


class Growth:
    """The context growing as ribbit's backend grows it (models.llama_backend: room for the prompt and a turn
    before each prefill, more while decoding), up to `largest`; each growth printed with its cost."""

    def __init__(self, runtime, largest: int, turn_room: int) -> None:  # type: ignore[no-untyped-def]
        self.runtime, self.largest, self.turn_room = runtime, largest, turn_room
        self.events: list[tuple[int, int, float]] = []

    def fit(self, needed: int) -> None:
        from models.memory import grown_context

        allocated = self.runtime.n_ctx()
        if needed <= allocated or allocated >= self.largest:
            return
        target = grown_context(allocated, needed, self.largest)
        started = time.perf_counter()
        self.runtime.resize(target)
        self.events.append((allocated, self.runtime.n_ctx(), time.perf_counter() - started))
        print(f"           context {allocated} -> {self.runtime.n_ctx()} in {self.events[-1][2]:.2f} s", flush=True)

    @property
    def seconds(self) -> float:
        return sum(s for _, _, s in self.events)


def teacher_forced(runtime, tokens: list[int], drafter: LookupDrafter | None, budget: DraftBudget,
                   growth: Growth | None = None) -> dict:
    """Decode `tokens` as if sampled: one by one, or with lookup drafts verified against the recording."""
    started = time.perf_counter()
    batches: list[int] = []
    drafted = accepted = 0
    first_token_s = None
    single_s: list[float] = []
    verify_s: list[float] = []  # per verified batch, whatever its size
    rollback_s = 0.0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        room = min(MAX_DRAFT, len(tokens) - i - 1)
        drafts: list[int] = []
        if drafter is not None:
            budget.observe(token)  # the engine's shadow proposals (models.llama_backend._propose)
        if drafter is not None and room > 0:
            stream = runtime.input_ids[: runtime.n_tokens]
            drafts = budget.draft_or_shadow(room, runtime.n_tokens, lambda n: drafter.propose(stream, token, n))
        if growth is not None and runtime.n_tokens + 1 + len(drafts) > runtime.n_ctx():
            growth.fit(runtime.n_tokens + 1 + len(drafts) + min(len(tokens) - i, growth.turn_room))
        first = runtime.n_tokens
        timed = time.perf_counter()
        if drafts:
            runtime.eval_all([token, *drafts])
            verify_s.append(time.perf_counter() - timed)
            # the recording is what the model "samples": drafts count while they agree with it
            ok = 0
            for d, truth in zip(drafts, tokens[i + 1 :]):
                if d != truth:
                    break
                ok += 1
            if ok < len(drafts):
                rolled = time.perf_counter()
                runtime.truncate(first + 1 + ok)
                rollback_s += time.perf_counter() - rolled
            budget.record(len(drafts), ok)
            for kept in drafts[:ok]:
                budget.observe(kept)
            drafted += len(drafts)
            accepted += ok
        else:
            runtime.eval([token])
            single_s.append(time.perf_counter() - timed)
            ok = 0
        budget.cost.record(1 + len(drafts), time.perf_counter() - timed, first)
        batches.append(len(drafts))
        if first_token_s is None:
            first_token_s = time.perf_counter() - started
        i += 1 + ok
    budget.drop()  # the next span follows a tool result, not this text
    return {"s": time.perf_counter() - started, "batches": batches, "drafted": drafted, "accepted": accepted,
            "first_token_s": first_token_s or 0.0, "single_s": single_s, "verify_s": verify_s, "rollback_s": rollback_s}


def bare_rates(path: Path, plan, prompt_tokens: int = 256, decode_tokens: int = 24) -> tuple[float, float]:
    """Prompt and decode tokens/s of a bare llama-cpp-python Llama on the same GGUF, threads and settings."""
    from models.llama_runtime import open_llama

    llm = open_llama(model_path=str(path), n_ctx=2048, n_batch=plan.n_batch, n_ubatch=plan.n_batch,
                          n_threads=plan.n_threads, n_threads_batch=plan.n_threads, flash_attn=plan.flash_attn,
                          type_k=plan.type_kv, type_v=plan.type_kv, verbose=False)
    try:
        vocab = llm.n_vocab()
        prompt = [(13 * i + 5) % vocab for i in range(prompt_tokens)]
        started = time.perf_counter()
        llm.eval(prompt)
        prefill = prompt_tokens / (time.perf_counter() - started)
        started = time.perf_counter()
        for i in range(decode_tokens):
            llm.eval([(7 * i + 11) % vocab])
        decode = decode_tokens / (time.perf_counter() - started)
    finally:
        llm.close()
    return prefill, decode


def recorded_tree(session: Path, repo: Path) -> str:
    """The commit whose files the session was recorded on (the one that added its fixture; a later edit of
    the fixture, such as its commands made portable, does not count), so that its recorded Reads and Edits
    meet the files they met then; HEAD where history does not have it."""
    found = subprocess.run(["git", "-C", str(repo), "log", "-1", "--diff-filter=A", "--format=%H", "--", str(session.resolve())],
                           capture_output=True, text=True, check=False).stdout.strip()
    return found or "HEAD"


def tools_wall(header: dict, steps: int, session: Path) -> float:
    """Wall time of the same turns through `ribbit run` with real tools and an instant (replay) model,
    on the files the session was recorded on."""
    from bench.record_session import ROOT as REPO
    from bench.record_session import this_python_first

    with tempfile.TemporaryDirectory(prefix="ribbit-session-tools-") as tmp:
        repo = Path(tmp) / "ribbit"
        repo.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", recorded_tree(session, REPO)],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
        for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=r", "-c", "user.email=r@r", "commit", "-qm", "b"]):
            subprocess.run(["git", "-C", str(repo), *args], check=True)
        replay = Path(tmp) / "turns.jsonl"
        replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in header["assistant_raw"][:steps]))
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "app.cli", "run", header["task"], "--repo", str(repo), "--model",
                        f"replay:{replay}", "--mode", "full-auto", "--no-sandbox"], cwd=REPO, env=this_python_first(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return time.perf_counter() - started


def session_size(head: list[int], steps: list[tuple[list[int], list[int]]]) -> int:
    """Tokens the replay appends: the system prompt and task, then each step's assistant turn and tool result."""
    return len(head) + sum(len(assistant) + len(follow) for assistant, follow in steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.session", description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=MODEL, help="default: the FrogNano-shaped Q4_K_M (built if missing); 'default': the embedded model")
    parser.add_argument("--session", type=Path, default=SESSION)
    parser.add_argument("--steps", type=int, default=None, help="replay only the first N steps")
    parser.add_argument("--no-draft", action="store_true", help="decode the assistant turns token by token")
    parser.add_argument("--no-extras", action="store_true",
                        help="the replay's figures only (no bare loop, verify-cost curve or offline acceptance)")
    parser.add_argument("--whole", action="store_true", help="allocate the largest context at the start (no growth)")
    parser.add_argument("--weights", choices=["repacked", "plain"], default=None,
                        help="llama.cpp's repacked weight copies or the mapped weights as they are, instead of the planner's")
    parser.add_argument("--free-gib", type=float, default=None, help="the memory planner's free-memory input (default: the kernel's)")
    parser.add_argument("--kv", choices=["f16", "q8_0"], default=None, help="KV cache type instead of the planner's")
    parser.add_argument("--flash-attn", choices=["on", "off"], default=None, help="flash attention instead of the planner's")
    args = parser.parse_args(argv)

    from models.llama_runtime import LlamaRuntime
    from models.memory import plan_memory
    from models.threads import ContentionMeter, ThreadPolicy

    path = ensure_model(args.gguf)
    header, messages = load_session(args.session)
    head, all_steps = render_steps(header, messages)
    steps = all_steps[: args.steps] if args.steps else all_steps
    policy, meter = ThreadPolicy(), ContentionMeter()
    meter.start()
    probe = LlamaRuntime(path, n_ctx=512, n_batch=64, n_threads=1)  # only to tokenise
    try:
        head_tokens = probe.tokenize(head.encode(), False, True)
        all_tokens = [(probe.tokenize(a.encode(), False, True), probe.tokenize(f.encode(), False, True)) for a, f in all_steps]
        step_tokens = all_tokens[: len(steps)]
        # A trained vocabulary has " return" as one token; bench.quantize's fallback byte pairs need
        # three, and spend about twice the tokens (and so the time) on the whole session.
        vocabulary = ("a trained BPE" if len(probe.tokenize(b" return", False, False)) == 1
                      else "synthetic byte pairs, about twice a trained tokenizer's count: rebuild with bench.quantize")
    finally:
        probe.close()
    total = session_size(head_tokens, step_tokens)
    if args.free_gib is not None:  # an 8 GB laptop with a browser open: 5
        import models.memory

        free = int(args.free_gib * (1 << 30))
        models.memory.available_memory = lambda: free  # type: ignore[assignment]
    # As `ribbit run` plans it: the largest context of the contract (131,072) where memory allows, starting
    # small and growing (--whole: all of it allocated at the start).
    plan = plan_memory(path, 131_072, threads=policy.observe(meter.stop()), rollback_tokens=MAX_DRAFT)
    if args.whole:
        plan.start_ctx = plan.n_ctx
    if plan.n_ctx < total + MAX_DRAFT:  # a small model's trained context (SmolLM2: 8,192) holds fewer steps
        fits, used = 0, len(head_tokens)
        for assistant, follow in step_tokens:
            used += len(assistant) + len(follow)
            if used + MAX_DRAFT > plan.n_ctx:
                break
            fits += 1
        if not fits:
            print(f"bench.session: {path.name}'s context holds {plan.n_ctx} tokens, too few for even the first step")
            return 2
        print(f"(the context holds {plan.n_ctx} tokens, the session needs {total}: replaying its first {fits} steps)")
        steps, step_tokens = steps[:fits], step_tokens[:fits]
        total = session_size(head_tokens, step_tokens)
    if args.kv:  # to compare settings on the whole task (the planner's figures: README)
        plan.kv_type = args.kv
    if args.flash_attn:
        plan.flash_attn = args.flash_attn == "on"
    print(f"session {args.session.name}: {len(steps)} steps, {total} tokens ({len(head_tokens)} system + task; tokenizer: {vocabulary}); "
          f"model {path.name}; plan: {plan.describe()}", flush=True)
    cpu0, load0 = os.times(), os.getloadavg()
    repack = args.weights != "plain"
    runtime = LlamaRuntime(path, n_ctx=plan.initial_ctx, n_batch=plan.n_batch, n_threads=plan.n_threads,
                           flash_attn=plan.flash_attn, type_kv=plan.type_kv, n_rs_seq=MAX_DRAFT, repack=repack)
    # The AMX guard (models.llama_runtime) may keep the weights in plain buffers whatever --weights asks.
    print(f"weights: {'repacked' if runtime.model_params.use_extra_bufts else 'plain buffers (no repacked copies)'}", flush=True)
    from models.llama_backend import TURN_ROOM

    growth = Growth(runtime, plan.n_ctx, TURN_ROOM)
    drafter = None if args.no_draft else LookupDrafter()
    budget = DraftBudget(VerifyCost())
    prefill_s = decode_s = 0.0
    prefill_n = decode_n = 0
    ttft: list[float] = []
    batches: list[int] = []
    drafted = accepted = 0
    wall0 = time.perf_counter()
    try:
        pending = head_tokens
        for index, (assistant, follow) in enumerate(step_tokens, 1):
            grown = growth.seconds
            growth.fit(runtime.n_tokens + len(pending) + 1 + min(len(assistant), TURN_ROOM))
            started, step_cpu = time.perf_counter(), os.times()
            runtime.eval(pending)
            spent = time.perf_counter() - started
            prefill_s += spent
            prefill_n += len(pending)
            result = teacher_forced(runtime, assistant, drafter, budget, growth)
            result["s"] -= growth.seconds - grown  # counted apart
            decode_s += result["s"]
            decode_n += len(assistant)
            batches += result["batches"]
            drafted += result["drafted"]
            accepted += result["accepted"]
            ttft.append(spent + result["first_token_s"])
            print(f"  step {index:2d}: prompt {len(pending):5d} tokens in {spent:6.1f} s, first token after {ttft[-1]:6.1f} s, "
                  f"assistant {len(assistant):4d} tokens in {result['s']:5.1f} s "
                  f"({result['accepted']}/{result['drafted']} drafts kept)", flush=True)
            # why a step was slow: the decode kinds apart, and whether this process had the CPU
            cpu_now = os.times()
            step_wall = time.perf_counter() - started
            step_cpu_s = (cpu_now.user + cpu_now.system) - (step_cpu.user + step_cpu.system)
            singles, verifies = result["single_s"], result["verify_s"]
            print(f"           {len(singles)} single decodes median {statistics.median(singles) if singles else 0:.3f} s, "
                  f"{len(verifies)} verify batches (mean {statistics.mean(result['batches']) if result['batches'] else 0:.1f} drafts/decode) "
                  f"median {statistics.median(verifies) if verifies else 0:.3f} s max {max(verifies, default=0):.3f} s, "
                  f"rollbacks {result['rollback_s'] * 1000:.1f} ms; CPU {step_cpu_s / step_wall:.2f} s per wall-second "
                  f"(threads {plan.n_threads}); load {os.getloadavg()[0]:.2f}", flush=True)
            pending = follow
    finally:
        runtime_ctx = runtime.n_ctx()
        runtime.close()
    model_wall = time.perf_counter() - wall0
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # before the bare loop below loads its own copy
    cpu1 = os.times()
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    tools_s = tools_wall(header, len(steps), args.session)
    if args.no_extras:
        print(f"\nwall time {model_wall + tools_s:.0f} s = prompt processing {prefill_s:.0f} s + decoding {decode_s:.0f} s "
              f"+ tools and harness {tools_s:.1f} s + context growth {growth.seconds:.1f} s; prompt {prefill_n / prefill_s:.1f} tok/s, "
              f"decode {decode_n / decode_s:.2f} tok/s; {len(batches)} decodes for {decode_n} tokens ({accepted}/{drafted} drafts kept)")
        print(f"context: {plan.initial_ctx} at the start, {runtime_ctx} at the end (largest {plan.n_ctx}); "
              f"{len(growth.events)} growths: " + (", ".join(f"{a} -> {b} in {t:.2f} s" for a, b, t in growth.events) or "none")
              + f"; peak resident memory {peak:.2f} GiB (model file {path.stat().st_size / 2**30:.2f} GiB)")
        return 0
    bare_prefill, bare_decode = bare_rates(path, plan)
    print(f"\nwall time {model_wall + tools_s:.0f} s = prompt processing {prefill_s:.0f} s + decoding {decode_s:.0f} s "
          f"+ tools and harness {tools_s:.1f} s + context growth {growth.seconds:.1f} s "
          f"(+ {model_wall - prefill_s - decode_s - growth.seconds:.1f} s bookkeeping)")
    print(f"context: {plan.initial_ctx} at the start, {runtime_ctx} at the end (largest {plan.n_ctx}); "
          f"{len(growth.events)} growths: " + (", ".join(f"{a} -> {b} in {t:.2f} s" for a, b, t in growth.events) or "none")
          + f"; peak resident memory {peak:.2f} GiB (model file {path.stat().st_size / 2**30:.2f} GiB)")
    print(f"time to first token per step: median {statistics.median(ttft):.1f} s, max {max(ttft):.1f} s")
    print(f"prompt {prefill_n / prefill_s:.1f} tok/s vs bare llama-cpp-python {bare_prefill:.1f} tok/s; "
          f"decode {decode_n / decode_s:.2f} tok/s ({'no drafts' if args.no_draft else 'with lookup drafts'}, teacher-forced) vs bare {bare_decode:.2f} tok/s "
          f"(one token at a time)")
    if drafter is not None:
        print(f"drafting during the run (ribbit's policy: draft only where the measured verify cost pays): "
              f"{accepted}/{drafted} drafts kept, {len(batches)} decodes for {decode_n} tokens")
        bands = budget.cost.measured()
        if bands:
            print("verify cost of 1 + k tokens vs 1 as the policy measured it during the run, by context depth: " + "; ".join(
                f"{band * DEPTH_BAND // 1024}-{(band + 1) * DEPTH_BAND // 1024}K deep " + " ".join(f"k={k}: {c:.2f}" for k, c in costs.items())
                for band, costs in bands.items()))
    from bench.engine import verify_cost

    curve = verify_cost(path, rounds=2, context=128)["cpu_cost"]
    stream: list[int] = list(head_tokens)
    spans = []
    for assistant, follow in all_tokens:  # the whole recording, whatever --steps ran through the model
        spans.append((len(stream), len(stream) + len(assistant)))
        stream += assistant + follow
    print("verify cost of 1 + k tokens vs 1 at this size, CPU time, measured now: " + "  ".join(f"k={k}: {c:.2f}" for k, c in enumerate(curve) if k))
    tokens_total = sum(end - start for start, end in spans)
    for k in (1, 2, 4, 8):
        d, a, n, (here, memory_bound) = offline_acceptance(stream, spans, k, [curve, list(PRIOR_COST)])
        print(f"teacher-forced lookup over all {len(spans)} recorded turns, drafts of up to {k}: {a}/{d} drafted tokens match the recording ({a / max(1, d):.0%}); "
              f"{tokens_total} tokens in {n} decodes; expected decode speed-up {tokens_total / here:.2f}x with the verify "
              f"cost measured here, {tokens_total / memory_bound:.2f}x where decoding is memory-bound (9 tokens ~ 1.7)")
    print(f"machine: {plan.threads.reason() if plan.threads else plan.n_threads}; CPU time of this process {cpu:.0f} s over "
          f"{model_wall:.0f} s; load average {load0[0]:.1f} at start, {os.getloadavg()[0]:.1f} at the end (shared machine)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
