"""`python -m bench.engine [--qwen35 PATH.gguf] [--steps 20]` — the inference engine's figures, in one run.

For the embedded SmolLM2 GGUF and a `qwen35` hybrid GGUF (--qwen35; default: a tiny one built by our own
converter into ribbit's cache, once):
1. tokens evaluated / tokens in the stream over an N-step agent session (append-only: ~1.0), beside
   what a naive loop that re-renders the history each step would evaluate;
2. decode tokens/s through ribbit's backend vs a bare llama-cpp-python loop on the same GGUF and settings;
3. time to first token after a tool result (cached stream) vs the same prompt with no cache;
4. second-launch time to first token (system prompt loaded from disk) vs first launch;
5. malformed tool calls with the grammar on vs off, over the same sampled sessions (seeds), the call
   opening forced by a response prefix so that every session makes an attempt;
6. the cost of verifying 1 + k tokens in one batch vs one token, k = 1..8 (with the rollback snapshots);
7. lookup drafting on a copy-heavy turn (writing out a file just read): decode speed-up, acceptance;
8. the MTP head's acceptance, where the GGUF has the layer;
9. prompt and decode speed by prefill batch size, KV type and flash attention (only with --only 9);
d. prompt processing at depth (1K, 4K, 8K tokens in the context) through ribbit vs a bare llama-cpp-python
   loop on the same state, same batch and threads (only with --only d).
`--model frognano --no-qwen35 --only 268` gives the real-size figures (the synthetic FrogNano that
`python -m bench.quantize` writes into ribbit's cache);
`--after-busy 30` repeats section 2 right after 30 s of full load.
Timings on a shared 2-core machine are noisy: A and B alternate and the figures are medians of ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from agent.core.prompt import system_prompt
from bench.assets import model_path, tiny_qwen35
from agent.core.tools import default_tools
from models.base import GenerationRequest, TextChunk, TurnEnd
from models.chat import ChatMessage, ToolCall
from models.dialects import parser_for
from models.drafting import LookupDrafter
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel

TASK = "The tests in test_calc.py fail. Find the bug in calc.py and fix it, then run the tests."
TOOLS = default_tools()
SPECS = [t.spec() for t in TOOLS.values()]
CALL_OPENINGS = {"json": '{"tool": "', "hermes": "<tool_call>\n", "qwen3_coder": "<tool_call>\n", "gemma4": "<|tool_call>call:"}


def tool_output(step: int) -> str:
    lines = [f"{n:6d}\tdef function_{step}_{n}(value):  # line {n} of a file the agent read" for n in range(1, 9)]
    return "\n".join(lines)


def stream(model: LlamaCppModel, messages: list[ChatMessage], max_tokens: int, tools=SPECS) -> tuple[str, TurnEnd, float, float | None, float]:
    """One turn streamed: (text, end, when it began, when its first text came or None, when it ended);
    times from time.perf_counter()."""
    started = time.perf_counter()
    first = None
    text, end = "", None
    for chunk in model.generate(GenerationRequest(messages=messages, tools=tools, max_tokens=max_tokens)):
        if isinstance(chunk, TextChunk):
            first = first or time.perf_counter()
            text += chunk.text
        elif isinstance(chunk, TurnEnd):
            end = chunk
    assert end is not None
    return text, end, started, first, time.perf_counter()


def turn(model: LlamaCppModel, messages: list[ChatMessage], max_tokens: int, tools=SPECS) -> tuple[str, TurnEnd, float]:
    """(text, end, seconds to the first sampled token or the end of the turn)."""
    text, end, started, first, ended = stream(model, messages, max_tokens, tools)
    return text, end, (first or ended) - started


def load_average() -> str:
    import os

    return "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())


def load(path: Path, state_dir: Path, **options) -> LlamaCppModel:
    settings = dict(n_ctx=8192, temperature=0.7, seed=7, state_dir=state_dir)
    settings.update(options)
    return LlamaCppModel(path, **settings)


def session_messages(model: LlamaCppModel, root: Path) -> list[ChatMessage]:
    describe = model.info.dialect == "json"
    return [ChatMessage(role="system", content=system_prompt(root, SPECS, describe_tools=describe)),
            ChatMessage(role="user", content=TASK)]


def session(path: Path, steps: int, work: Path) -> dict:
    """An agent-shaped session: each step generates, then a tool result is appended."""
    model = load(path, work / "session-states", persist_states=False)
    try:
        messages = session_messages(model, work)
        prompts, completions = [], []
        ttft_cached = 0.0
        for step in range(1, steps + 1):
            text, end, ttft = turn(model, messages, max_tokens=16)
            prompts.append(end.usage.prompt_tokens)
            completions.append(end.usage.completion_tokens)
            ttft_cached = ttft
            call = ToolCall(id=f"call_{step}", name="Read", arguments={"file_path": f"src/module_{step}.py"})
            messages += [
                ChatMessage(role="assistant", content=text, tool_calls=[call]),
                ChatMessage(role="tool", content=tool_output(step), tool_call_id=call.id, name="Read"),
            ]
        # The next step's prompt: time to first token after the last tool result, from the cache.
        _, end, ttft_cached = turn(model, messages, max_tokens=1)
        stream = len(model.stream_tokens())
        evaluated = model.stats.evaluated
        naive = sum(prompts) + end.usage.prompt_tokens + sum(completions)
    finally:
        model.close()
    cold_model = load(path, work / "cold-states", persist_states=False)
    try:
        cold_messages = messages
        _, cold_end, ttft_cold = turn(cold_model, cold_messages, max_tokens=1)
    finally:
        cold_model.close()
    return {
        "stream": stream, "evaluated": evaluated, "ratio": evaluated / stream, "naive": naive,
        "naive_ratio": naive / stream, "ttft_cached": ttft_cached, "ttft_cold": ttft_cold,
        "cold_prompt": cold_end.usage.prompt_tokens,
    }


def decode_speed(path: Path, work: Path, tokens: int, rounds: int) -> dict:
    """Decode tokens/s, ribbit (--draft none) vs a bare llama-cpp-python `Llama` loop on the same GGUF with
    the same threads and settings, in pairs, alternating which goes first.

    Timed from the first sampled token to the end of the turn, in wall-clock seconds and in CPU
    seconds of this process (CPU time is what other programs on a shared machine inflate least).
    The figure is the median of the per-pair ratios."""
    from models.llama_runtime import open_llama

    # ribbit chooses its threads as it would for a user (cores, measured contention); both loops then run
    # with that count, fixed, so the comparison is the loop around llama_decode and nothing else.
    probe = load(path, work / "decode-probe", persist_states=False, n_ctx=512)
    threads = probe.info.threads_reason
    chosen = probe.plan.n_threads
    probe.close()
    model = load(path, work / "decode-states", persist_states=False, temperature=0.0, draft="none", n_threads=chosen)
    plan = model.plan
    messages = [ChatMessage(role="system", content="You are a storyteller."),
                ChatMessage(role="user", content="Tell a very long story about a frog who learns to code.")]
    bare = open_llama(
        model_path=str(path), n_ctx=plan.n_ctx, n_batch=plan.n_batch, n_ubatch=plan.n_batch, n_threads=plan.n_threads,
        n_threads_batch=plan.n_threads, flash_attn=plan.flash_attn, type_k=plan.type_kv, type_v=plan.type_kv, verbose=False,
    )
    prompt = model._tokenize(model.template.render_conversation(messages, SPECS))
    # Where the time goes: each loop's wall time inside llama_decode, so that what is left per token is
    # the loop's own work (sampling, detokenising, drafting bookkeeping, the grammar watcher).
    in_decode = [0.0]
    stubbed = [False, False]  # [wanted for this run, on now]: llama_decode skipped, so only the loop is timed
    for ctx in (model.llm._ctx, bare._ctx):
        ctx.decode = _timed_decode(ctx.decode, in_decode, stubbed)

    def run_ribbit() -> tuple[float, float, float]:
        model.reset()  # the system prompt comes back from its snapshot: at real size a re-read is a minute
        marks = []
        request = GenerationRequest(messages=messages, tools=SPECS, max_tokens=tokens)
        last = (0.0, 0.0)
        for chunk in model.generate(request):
            if isinstance(chunk, TextChunk):
                last = (time.perf_counter(), time.process_time())
                if not marks:
                    marks.append(last)
                    in_decode[0] = 0.0
                    stubbed[1] = stubbed[0]
            elif isinstance(chunk, TurnEnd):
                n = chunk.usage.completion_tokens - 1
        # Up to the last token's text, as the bare loop stops after its last decode (the end of a turn,
        # a /proc/stat read for the thread policy, is once a turn, not per token).
        wall, cpu = last[0] - marks[0][0], last[1] - marks[0][1]
        stubbed[1] = False
        return n / wall, n / cpu, (wall - in_decode[0]) / n

    def run_bare() -> tuple[float, float, float]:
        if not read:
            bare.reset()
            bare.eval(prompt)
            read.append(bare.save_state())
        else:
            bare.load_state(read[0])
        sampler = bare._init_sampler(temp=0.0, top_p=0.8, top_k=20, min_p=0.0)
        stops = {bare.token_eos(), *model.stop_ids}
        token = sampler.sample(bare._ctx, -1)
        bare.eval([token])
        wall0, cpu0 = time.perf_counter(), time.process_time()
        in_decode[0] = 0.0
        stubbed[1] = stubbed[0]
        produced = 1
        while produced < tokens:
            token = sampler.sample(bare._ctx, -1)
            produced += 1
            if token in stops:
                break
            bare.eval([token])
        n = produced - 1
        wall = time.perf_counter() - wall0
        stubbed[1] = False
        return n / wall, n / (time.process_time() - cpu0), (wall - in_decode[0]) / n

    read: list = []  # the bare loop's state after the prompt, read once
    ribbit_rates, bare_rates = [], []
    loop_only: dict[str, list[float]] = {"ribbit": [], "bare": []}
    try:
        for index in range(rounds):
            order = (run_ribbit, run_bare) if index % 2 == 0 else (run_bare, run_ribbit)
            for runner in order:
                (ribbit_rates if runner is run_ribbit else bare_rates).append(runner())
        # The loops alone: llama_decode skipped after the prompt, so each token costs only the loop's own
        # work (the same sampled token comes back from the same logits: a steady, noise-free comparison).
        stubbed[0] = True
        try:
            for index in range(rounds):
                for name, runner in ((("ribbit", run_ribbit), ("bare", run_bare)) if index % 2 == 0 else (("bare", run_bare), ("ribbit", run_ribbit))):
                    loop_only[name].append(1.0 / runner()[0])
        except ZeroDivisionError:  # the repeated stubbed token streamed as one piece (no span to time)
            loop_only = {"ribbit": [], "bare": []}
        stubbed[0] = False
    finally:
        model.close()
        bare.close()
    median = statistics.median
    return {
        "ribbit": median(r[0] for r in ribbit_rates), "bare": median(r[0] for r in bare_rates),
        "ratio": median(a[0] / b[0] for a, b in zip(ribbit_rates, bare_rates)),
        "ribbit_cpu": median(r[1] for r in ribbit_rates), "bare_cpu": median(r[1] for r in bare_rates),
        "cpu_ratio": median(a[1] / b[1] for a, b in zip(ribbit_rates, bare_rates)), "threads": threads,
        "ribbit_outside_ms": median(r[2] for r in ribbit_rates) * 1000, "bare_outside_ms": median(r[2] for r in bare_rates) * 1000,
        "pairs": [(round(a[0] / b[0], 3), round(a[1] / b[1], 3)) for a, b in zip(ribbit_rates, bare_rates)],
        "ribbit_loop_us": median(loop_only["ribbit"]) * 1e6 if loop_only["ribbit"] else None,
        "bare_loop_us": median(loop_only["bare"]) * 1e6 if loop_only["bare"] else None,
    }


def depth_speed(path: Path, work: Path, depths: list[int], prompt: int, rounds: int, variants: list[str]) -> dict:
    """Prompt processing at depth: a `prompt`-token user message read with `depth` tokens already in the
    context, through ribbit's backend (as a turn: the message, its markup and the generation prompt) and
    through a bare llama-cpp-python `Llama` loop evaluating the same tokens on the same state (same batch,
    threads, KV type and flash attention), alternating, `rounds` pairs per depth; medians.

    Each depth is one conversation (ribbit's system prompt, then a user message filling it to the depth and
    a one-token answer), read once by ribbit, whose state after it the bare loop is given (nothing is
    re-read: a round starts from ribbit's own snapshot, the bare loop from the same state copied in).
    `variants` are llama.cpp settings the bare loop also runs with, each against ribbit's on the same
    rounds: "ubatch 512" (llama-cpp-python's default micro-batch) and "plain weights" (no repacked copy)."""
    from models import llama_state
    from models.llama_runtime import open_llama

    model = load(path, work / "depth-states", persist_states=False, temperature=0.0, draft="none",
                 n_ctx=max(depths) + prompt + 2048)
    plan = model.plan

    def bare_loop(variant: str) -> object:
        batch = 512 if variant == "ubatch 512" else plan.n_batch
        options = dict(model_path=str(path), n_ctx=plan.n_ctx, n_batch=batch, n_ubatch=batch, n_threads=plan.n_threads,
                       n_threads_batch=plan.n_threads, flash_attn=plan.flash_attn, type_k=plan.type_kv, type_v=plan.type_kv,
                       verbose=False)
        if variant != "plain weights":
            return open_llama(**options)
        import llama_cpp
        import llama_cpp.llama_cpp as bindings

        library = bindings.llama_model_default_params

        def plain():  # type: ignore[no-untyped-def]
            params = library()
            params.use_extra_bufts = False
            return params

        bindings.llama_model_default_params = plain
        try:
            return llama_cpp.Llama(**options)
        finally:
            bindings.llama_model_default_params = library

    system = session_messages(model, work)[0]
    line = "    value_{i} = compute(request, field_{i}, default={i})  # step {i} of the handler\n"
    asked = "Explain what this does:\n"
    while model.count_tokens(asked) < prompt - 16:  # the turn's markup and generation prompt make up the rest
        asked += line.format(i=1000 + len(asked.splitlines()))
    question = ChatMessage(role="user", content=asked)
    results: dict[int, dict[str, list[float]]] = {}
    engines = ["ribbit", "bare", *variants]
    try:
        for depth in depths:
            fill = ""
            base = model.prompt_tokens([system, ChatMessage(role="user", content="x")], SPECS)
            while model.count_tokens(fill) < depth - base:
                fill += "".join(line.format(i=i) for i in range(len(fill.splitlines()), len(fill.splitlines()) + 4))
            opening = [system, ChatMessage(role="user", content="Read this:\n" + fill)]
            model.reset()
            text, _, _ = turn(model, opening, max_tokens=1)
            messages = [*opening, ChatMessage(role="assistant", content=text), question]
            state, held = llama_state.capture(model.llm), model.stream_tokens()
            times: dict[str, list[float]] = {name: [] for name in engines}
            evaluated: list[int] = []
            for index in range(rounds):
                order = engines if index % 2 == 0 else engines[::-1]
                for name in order:
                    if name == "ribbit":
                        _, end, _ = turn(model, messages, max_tokens=1)  # from ribbit's snapshot after the answer
                        times[name].append(end.usage.prefill_s)
                        evaluated.append(end.usage.evaluated_tokens)
                        read = model.stream_tokens()[len(held) : len(held) + end.usage.evaluated_tokens]
                        continue
                    bare = bare_loop(name)
                    try:
                        if not llama_state.put(bare._ctx, state):  # type: ignore[attr-defined]
                            raise SystemExit("the bare loop refused ribbit's state")
                        bare.input_ids[: len(held)] = held  # type: ignore[attr-defined]
                        bare.n_tokens = len(held)  # type: ignore[attr-defined]
                        started = time.perf_counter()
                        bare.eval(read)  # type: ignore[attr-defined]
                        times[name].append(time.perf_counter() - started)
                    finally:
                        bare.close()  # type: ignore[attr-defined]
            results[depth] = {"held": [len(held)], "tokens": evaluated, **times}
    finally:
        model.close()
    return {"plan": plan.describe(), "results": results}


def _timed_decode(decode, total: list[float], stubbed: list[bool]):  # type: ignore[no-untyped-def]
    def timed(batch):  # type: ignore[no-untyped-def]
        if stubbed[1]:
            return None
        started = time.perf_counter()
        try:
            return decode(batch)
        finally:
            total[0] += time.perf_counter() - started
    return timed


def make_busy(seconds: float) -> None:
    """Keep every core busy for `seconds` (the load average stays high for a minute after)."""
    import os
    import subprocess
    import sys

    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(seconds)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def verify_cost(path: Path, rounds: int, context: int = 512) -> dict:
    """Wall time of one decode of 1 + k tokens (k = 0..8) after a `context`-token prompt, relative to
    one token, with the rollback snapshots drafting keeps; each batch's k drafts are rolled back.
    Also: a single-token decode with and without the snapshots (what keeping them costs)."""
    from models.drafting import MAX_DRAFT
    from models.llama_runtime import LlamaRuntime
    from models.memory import plan_memory
    from models.threads import ContentionMeter, ThreadPolicy

    policy, meter = ThreadPolicy(), ContentionMeter()
    meter.start()
    time.sleep(0.5)
    plan = plan_memory(path, 4096, threads=policy.observe(meter.stop()))  # the threads ribbit would run
    times: dict[tuple[int, int], list[float]] = {}
    cpu_times: dict[tuple[int, int], list[float]] = {}
    for rs in (MAX_DRAFT, 0):
        runtime = LlamaRuntime(path, n_ctx=4096, n_batch=plan.n_batch, n_threads=plan.n_threads,
                               flash_attn=plan.flash_attn, type_kv=plan.type_kv, n_rs_seq=rs)
        try:
            vocab = runtime.n_vocab()
            prompt = [(17 * i + 3) % vocab for i in range(context)]
            runtime.eval(prompt)
            ks = range(MAX_DRAFT + 1) if rs else (0,)
            for round_ in range(rounds + 1):  # the first round warms up and is not counted
                for k in ks:
                    batch = [(31 * j + 7) % vocab for j in range(k + 1)]
                    first = runtime.n_tokens
                    started, cpu = time.perf_counter(), time.process_time()
                    runtime.eval_all(batch)
                    if round_:
                        times.setdefault((rs, k), []).append(time.perf_counter() - started)
                        cpu_times.setdefault((rs, k), []).append(time.process_time() - cpu)
                    runtime.truncate(first + 1)  # the drafts rolled back, as when all are rejected
        finally:
            runtime.close()
    median = statistics.median
    one, one_cpu = median(times[(MAX_DRAFT, 0)]), median(cpu_times[(MAX_DRAFT, 0)])
    return {"one_s": one, "cost": [median(times[(MAX_DRAFT, k)]) / one for k in range(MAX_DRAFT + 1)],
            "cpu_cost": [median(cpu_times[(MAX_DRAFT, k)]) / one_cpu for k in range(MAX_DRAFT + 1)],
            "snapshots_cost": one_cpu / median(cpu_times[(0, 0)]), "threads": plan.n_threads}


SETTINGS = [  # (label, n_batch, kv type, flash attention); the first is what the planner chooses at 131K context
    ("batch 256, KV q8_0 + FA", 256, "q8_0", True), ("batch 128, KV q8_0 + FA", 128, "q8_0", True),
    ("batch 512, KV q8_0 + FA", 512, "q8_0", True), ("batch 256, KV f16 + FA", 256, "f16", True),
    ("batch 256, KV f16, no FA", 256, "f16", False),
]


def settings_speed(path: Path, rounds: int, prompt: int = 512, decode: int = 16, only: list[str] | None = None) -> dict:
    """Prompt and decode speed for each of SETTINGS on this GGUF (ribbit's runtime, ribbit's threads, fixed for
    the run). Every round loads each setting in turn (the order reversed every other round) and times a
    `prompt`-token prefill, then `decode` single-token decodes at that depth; per setting: median tokens/s
    (wall) and the median of its per-round ratios to the first setting (wall and CPU seconds), so the
    ratios are A/B pairs taken minutes apart at most. The prefill's last batch is also timed on its own:
    its speed is the prompt speed at that depth (attention's share grows with it). `only`: the labels
    to measure (the first is the baseline)."""
    from models.llama_runtime import LlamaRuntime
    from models.memory import GGML_TYPES
    from models.threads import ContentionMeter, ThreadPolicy

    policy, meter = ThreadPolicy(), ContentionMeter()
    meter.start()
    time.sleep(0.5)
    threads = policy.observe(meter.stop()).n_threads
    settings = [s for s in SETTINGS if s[0] in only] if only else SETTINGS
    if not settings:
        raise SystemExit(f"--settings: none of {only} is one of {[s[0] for s in SETTINGS]}")
    found: dict[str, list[tuple[float, float, float, float, float]]] = {label: [] for label, *_ in settings}
    for round_ in range(rounds):
        for label, batch, kv, flash in (settings if round_ % 2 == 0 else settings[::-1]):
            runtime = LlamaRuntime(path, n_ctx=max(2048, 2 * (prompt + decode)), n_batch=batch, n_threads=threads,
                                   flash_attn=flash, type_kv=GGML_TYPES[kv])
            try:
                vocab = runtime.n_vocab()
                tokens = [(13 * i + 5) % vocab for i in range(prompt)]
                head = max(0, prompt - batch)
                started, cpu = time.perf_counter(), time.process_time()
                runtime.eval(tokens[:head])
                last = time.perf_counter()
                runtime.eval(tokens[head:])
                ended = time.perf_counter()
                prefill = (prompt / (ended - started), prompt / (time.process_time() - cpu))
                started, cpu = time.perf_counter(), time.process_time()
                for i in range(decode):
                    runtime.eval([(7 * i + 11) % vocab])
                found[label].append((*prefill, decode / (time.perf_counter() - started), decode / (time.process_time() - cpu),
                                     (prompt - head) / (ended - last)))
            finally:
                runtime.close()
    median = statistics.median
    base = found[settings[0][0]]
    rows = []
    for label, *_ in settings:
        runs = found[label]
        rows.append({
            "label": label, "prefill": median(r[0] for r in runs), "decode": median(r[2] for r in runs),
            "deep_prefill": median(r[4] for r in runs), "deep_ratio": median(r[4] / b[4] for r, b in zip(runs, base)),
            "prefill_ratio": median(r[0] / b[0] for r, b in zip(runs, base)),
            "prefill_cpu_ratio": median(r[1] / b[1] for r, b in zip(runs, base)),
            "decode_ratio": median(r[2] / b[2] for r, b in zip(runs, base)),
            "decode_cpu_ratio": median(r[3] / b[3] for r, b in zip(runs, base)),
        })
    return {"threads": threads, "rows": rows}


ROOT = Path(__file__).resolve().parents[1]
# Copy-heavy turns: the model writes out a text that is in its context, its first lines already written
# (a Write of a file just read). (name, text, what the user asks). A 135M model drifts from some texts
# more than others, so the turn's figure is one per file and their median, never one file's.
WRITE_BACK = ("agent/core/tools/read.py", "agent/core/tools/edit.py", "agent/core/tools/glob.py", "models/threads.py", "app/cli.py")


def write_back(relative: str) -> tuple[str, str, str]:
    name = Path(relative).name
    return (f"code: {relative}", (ROOT / relative).read_text()[:2500],
            f"Here is {name}:\n```python\n{{text}}\n```\nWrite {name} out again, unchanged.")


COPY_TURNS = [write_back(WRITE_BACK[0]), ("prose: README.md", (ROOT / "README.md").read_text()[:2000], "Copy this text exactly:\n\n{text}"),
              *(write_back(relative) for relative in WRITE_BACK[1:])]


def copied_lines(output: str, source: str) -> float:
    """The share of the output's non-empty lines that are lines of the source: how much of the turn
    really was a copy (a small model drifts away from the text it was asked to copy)."""
    lines = [line for line in output.splitlines() if line.strip()]
    known = set(source.splitlines())
    return sum(line in known for line in lines) / len(lines) if lines else 0.0


def undraftable(stream: np.ndarray, sampled: int) -> int:
    """How many of the last `sampled` tokens of `stream` no lookup proposal predicts (the longest
    earlier match of the tail before each proposes another token, or none): the turn's own writing,
    decoded one token at a time whatever the drafting policy."""
    ids = np.asarray(stream, dtype=np.int64)  # a copy: the model's buffer is reused by the next load
    drafter = LookupDrafter()
    start = len(ids) - sampled
    return sum(drafter.propose(ids[: p - 1], int(ids[p - 1]), 1) != [int(ids[p])] for p in range(start, len(ids)))


def decode_after_prefix(model: LlamaCppModel, messages: list[ChatMessage], max_tokens: int) -> tuple[str, int, float]:
    """(text, tokens sampled, seconds) of a turn whose response prefix is forced: timed from the prefix's
    text (read in one batch, the same in both modes) to the end of the turn."""
    forced = len(model._tokenize(model.response_prefix))
    text, end, _, first, ended = stream(model, messages, max_tokens, tools=[])
    assert first is not None
    return text, end.usage.completion_tokens - forced, ended - first


def copy_speedup(path: Path, work: Path, rounds: int, tokens: int) -> list[dict]:
    """Each copy-heavy turn decoded greedily with --draft none and --draft lookup, alternating: `tokens`
    sampled after the forced first lines; wall-clock decode tokens/s, median of the per-pair ratios."""
    found = []
    for name, text, ask in COPY_TURNS:
        messages = [ChatMessage(role="system", content="You are a coding agent."),
                    ChatMessage(role="user", content=ask.format(text=text))]
        prefix = ("```python\n" if "```" in ask else "") + "\n".join(text.splitlines()[:10]) + "\n"
        rates: dict[str, list[float]] = {"none": [], "lookup": []}
        texts: dict[str, str] = {}
        stats = None
        own: int | None = None  # greedy: the same text every round, so counted once
        for index in range(rounds):
            for draft in (("none", "lookup") if index % 2 == 0 else ("lookup", "none")):
                model = load(path, work / f"copy-{draft}", persist_states=False, temperature=0.0, draft=draft)
                model.response_prefix = prefix
                try:
                    output, sampled, seconds = decode_after_prefix(model, messages, tokens + len(model._tokenize(prefix)))
                    rates[draft].append(sampled / seconds)
                    texts[draft] = output
                    if draft == "none" and own is None:
                        own = undraftable(model.llm.input_ids[: model.llm.n_tokens], sampled)
                    if draft == "lookup":
                        stats = model.stats.lookup
                finally:
                    model.close()
        median = statistics.median
        found.append({
            "name": name, "none": median(rates["none"]), "lookup": median(rates["lookup"]),
            "ratio": median(b / a for a, b in zip(rates["none"], rates["lookup"])),
            "acceptance": stats.acceptance if stats else 0.0, "accepted": stats.accepted if stats else 0,
            "drafted": stats.drafted if stats else 0, "same": texts["none"] == texts["lookup"],
            "copied": copied_lines(texts["none"], text), "undraftable": own,
        })
    return found


class FixedDraft:
    """A draft budget that always drafts n tokens (measuring acceptance, not speed)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def length(self, n_max: int, depth: int = 0) -> int:
        return min(self.n, n_max)

    def record(self, drafted: int, accepted: int) -> None:
        pass


def mtp_acceptance(path: Path, work: Path, tokens: int) -> dict | None:
    """Greedy acceptance of the GGUF's own MTP head (every step drafts, whatever its confidence)."""
    import models.llama_backend as backend

    saved = backend.MTP_P_MIN, backend.MTP_TRIAL
    backend.MTP_P_MIN, backend.MTP_TRIAL = 0.0, 10**9
    try:
        model = load(path, work / "mtp", persist_states=False, temperature=0.0, draft="mtp")
        try:
            if model.llm.mtp is None:
                return None
            model._mtp_budget = FixedDraft(3)  # draft at every step, whatever the acceptance
            messages = [ChatMessage(role="system", content="You are a coding agent."),
                        ChatMessage(role="user", content="Explain what a binary search does, step by step.")]
            _, end, _ = turn(model, messages, max_tokens=tokens, tools=[])
            stats = model.stats.mtp
            return {"acceptance": stats.acceptance, "drafted": stats.drafted, "accepted": stats.accepted,
                    "tok_s": end.usage.completion_tokens / end.usage.decode_s}
        finally:
            model.close()
    finally:
        backend.MTP_P_MIN, backend.MTP_TRIAL = saved


def second_launch(path: Path, work: Path) -> dict:
    """Load + time to first token: first launch (evaluates and saves the system prompt), second launch
    (loads it from disk), and a launch in another repository (other system prompt: only the template's
    tool definitions, saved separately, can be reused)."""
    states = work / "launch-states"
    other = work / "another-repo"
    other.mkdir(exist_ok=True)
    times = []
    for root in (work, work, other):
        started = time.perf_counter()
        model = load(path, states)
        try:
            _, end, _ = turn(model, session_messages(model, root), max_tokens=1)
            times.append((time.perf_counter() - started, end.usage.cached_tokens, end.usage.evaluated_tokens))
        finally:
            model.close()
    return {"first": times[0], "second": times[1], "other": times[2]}


def malformed(path: Path, work: Path, sessions: int, max_tokens: int) -> dict:
    """Same seeds, grammar off then on; a turn is malformed when the parser or argument validation rejects it."""
    out = {}
    for use_grammar in (False, True):
        model = load(path, work / "grammar-states", persist_states=False, grammar=use_grammar)
        parser = parser_for(model.info.dialect, SPECS)
        opening = CALL_OPENINGS.get(model.info.dialect, "")
        model.response_prefix = ("</think>\n\n" if model.info.opens_reasoning else "") + opening
        bad = cut = 0
        sample = ""
        try:
            messages = session_messages(model, work)
            for seed in range(sessions):
                model.llm.set_seed(seed)
                text, end, _ = turn(model, messages, max_tokens=max_tokens)
                if end.finish_reason == "length":
                    cut += 1
                if not well_formed(parser.parse(text, model.info.opens_reasoning)):
                    bad += 1
                sample = sample or text
            out["on" if use_grammar else "off"] = (bad, cut, model.stats.grammar_triggers)
            out["sample_on" if use_grammar else "sample_off"] = sample
        finally:
            model.close()
    return out


def well_formed(parsed) -> bool:
    if parsed.errors or not parsed.tool_calls:
        return False
    for call in parsed.tool_calls:
        tool = TOOLS.get(call.name)
        if tool is None:
            return False
        try:
            tool.args_model.model_validate(call.arguments)
        except ValueError:
            return False
    return True


def report(name: str, path: Path, args: argparse.Namespace) -> None:
    print(f"\n== {name}: {path.name}")
    sections = set(args.only or "12345678")
    with tempfile.TemporaryDirectory(prefix="ribbit-bench-engine-") as tmp:
        work = Path(tmp)
        probe = load(path, work / "probe", persist_states=False)
        print(f"   arch {probe.info.architecture}, dialect {probe.info.dialect}, plan: {probe.plan.describe()}")
        probe.close()
        if sections & {"1", "3"}:
            s = session(path, args.steps, work)
        if "1" in sections:
            print(f"1. {args.steps}-step session: {s['evaluated']} tokens evaluated / {s['stream']} tokens appended "
                  f"= {s['ratio']:.3f}   (naive re-render each step: {s['naive']} evaluated, ratio {s['naive_ratio']:.1f})")
        if "2" in sections:
            for busy in ([0.0, args.after_busy] if args.after_busy else [0.0]):
                if busy:
                    make_busy(busy)
                    print(f"   (all cores kept busy for {busy:.0f} s just before; load average now {load_average()})")
                d = decode_speed(path, work, args.decode_tokens, args.rounds)
                print(f"2. decode{' right after busy' if busy else ''} (median of {args.rounds} pairs, ribbit --draft none; "
                      f"ribbit's thread choice: {d['threads']}; both loops then run with it): ribbit {d['ribbit']:.1f} tok/s vs bare llama-cpp-python "
                      f"{d['bare']:.1f} tok/s, ratio {d['ratio']:.3f} wall-clock; per CPU-second {d['ribbit_cpu']:.1f} vs "
                      f"{d['bare_cpu']:.1f}, ratio {d['cpu_ratio']:.3f}")
                print(f"   per token outside llama_decode: ribbit {d['ribbit_outside_ms']:.3f} ms vs bare "
                      f"{d['bare_outside_ms']:.3f} ms (sampling, detokenising, bookkeeping); per-pair ratios "
                      f"(wall, CPU): {d['pairs']}")
                if d["ribbit_loop_us"] is None:
                    print("   the loops alone (llama_decode skipped): n/a, the stubbed turn streamed no span to time")
                else:
                    print(f"   the loops alone (llama_decode skipped): ribbit {d['ribbit_loop_us']:.0f} us vs bare "
                          f"{d['bare_loop_us']:.0f} us per token")
        if "3" in sections:
            print(f"3. time to first token after a tool result: {s['ttft_cached']:.2f} s cached vs "
                  f"{s['ttft_cold']:.2f} s with no cache ({s['cold_prompt']}-token prompt)")
        if "4" in sections:
            launch = second_launch(path, work)
            (t1, _, e1), (t2, c2, e2), (t3, c3, e3) = launch["first"], launch["second"], launch["other"]
            print(f"4. launch to first token: first {t1:.2f} s (evaluated {e1}) vs second {t2:.2f} s "
                  f"(system prompt from disk: {c2} cached, {e2} evaluated); in another repo {t3:.2f} s "
                  f"({c3} cached, {e3} evaluated)")
        if "5" in sections:
            m = malformed(path, work, args.sessions, args.call_tokens)
            (off_bad, off_cut, _), (on_bad, on_cut, on_triggers) = m["off"], m["on"]
            print(f"5. malformed tool calls over {args.sessions} sampled sessions: grammar off {off_bad}/{args.sessions} "
                  f"(cut at {args.call_tokens} tokens: {off_cut}), grammar on {on_bad}/{args.sessions} "
                  f"(cut: {on_cut}, grammar engaged {on_triggers}x)")
            print(f"   first session, grammar off: {m['sample_off'][:160]!r}")
            print(f"   first session, grammar on:  {m['sample_on'][:160]!r}")
        if "6" in sections:
            v = verify_cost(path, args.rounds)
            curve = "  ".join(f"k={k}: {c:.2f}" for k, c in enumerate(v["cost"]) if k)
            cpu_curve = "  ".join(f"k={k}: {c:.2f}" for k, c in enumerate(v["cpu_cost"]) if k)
            print(f"6. verifying 1 + k tokens in one batch vs 1 token ({v['one_s'] * 1000:.0f} ms, {v['threads']} threads, "
                  f"median of {args.rounds}): wall {curve}; CPU time {cpu_curve}; keeping 8 rollback snapshots costs "
                  f"{v['snapshots_cost']:.2f}x CPU per token")
        if "7" in sections:
            copied = copy_speedup(path, work, args.rounds, args.copy_tokens)
            for c in copied:
                print(f"7. copy-heavy turn ({c['name']}, {args.copy_tokens} tokens, median of {args.rounds} pairs; "
                      f"{c['copied']:.0%} of the greedy output's lines are lines of the text): --draft lookup "
                      f"{c['lookup']:.1f} tok/s vs none {c['none']:.1f} tok/s = {c['ratio']:.2f}x wall-clock; lookup "
                      f"acceptance {c['acceptance']:.0%} ({c['accepted']}/{c['drafted']}); same text: {c['same']}; "
                      f"{c['undraftable']} of the {args.copy_tokens} tokens no lookup could draft (the model's own writing)")
            ratios = [c["ratio"] for c in copied]
            print(f"7. over the {len(ratios)} copy-heavy turns: median {statistics.median(ratios):.2f}x, lowest {min(ratios):.2f}x, "
                  f"{sum(r >= 1.5 for r in ratios)} of {len(ratios)} at 1.5x or more")
        if "9" in sections:
            found = settings_speed(path, args.rounds, args.settings_prompt, only=args.settings)
            print(f"9. settings ({args.settings_prompt}-token prefill, then 16 decodes at that depth; {found['threads']} threads; "
                  f"median of {args.rounds} rounds, each loading every setting in turn; ratios vs {found['rows'][0]['label']}, "
                  "as medians of per-round ratios, wall / CPU; 'last batch': the prefill's last batch alone, the prompt "
                  "speed at that depth):")
            for row in found["rows"]:
                print(f"   {row['label']:26s} prefill {row['prefill']:7.1f} tok/s (x{row['prefill_ratio']:.2f} / "
                      f"x{row['prefill_cpu_ratio']:.2f}), last batch {row['deep_prefill']:6.1f} tok/s (x{row['deep_ratio']:.2f})"
                      f"   decode {row['decode']:6.2f} tok/s (x{row['decode_ratio']:.2f} / x{row['decode_cpu_ratio']:.2f})")
            best = max(found["rows"], key=lambda r: r["prefill_cpu_ratio"])
            print(f"   fastest prefill per CPU-second: {best['label']} (x{best['prefill_cpu_ratio']:.2f}); "
                  "the planner (models.memory) keeps its choice unless a setting beats it by more than 5 % on prefill "
                  "without losing decode speed")
        if "d" in sections:
            depths = depth_speed(path, work, args.depths, args.depth_prompt, args.rounds, args.depth_variants)
            print(f"d. prompt processing at depth, {args.depth_prompt}-token message (median of {args.rounds} rounds, "
                  f"alternating; ribbit's plan: {depths['plan']}):")
            for depth, r in depths["results"].items():
                tokens = statistics.median(r["tokens"])
                ribbit = statistics.median(r["ribbit"])
                line = (f"   {r['held'][0]:6d} deep: ribbit {tokens / ribbit:6.1f} tok/s vs bare {tokens / statistics.median(r['bare']):6.1f} "
                        f"= {statistics.median(b / a for a, b in zip(r['ribbit'], r['bare'])):.3f}")
                for variant in args.depth_variants:
                    line += (f"; bare with {variant} {tokens / statistics.median(r[variant]):6.1f} tok/s "
                             f"(ribbit / it {statistics.median(b / a for a, b in zip(r['ribbit'], r[variant])):.3f})")
                print(line + f"  [{int(tokens)} tokens a round]", flush=True)
        if "8" in sections:
            mtp = mtp_acceptance(path, work, args.mtp_tokens)
            if mtp is None:
                print("8. MTP: this GGUF has no MTP layer")
            else:
                print(f"8. MTP head, greedy, 3 drafts at every step: acceptance {mtp['acceptance']:.0%} "
                      f"({mtp['accepted']}/{mtp['drafted']}), {mtp['tok_s']:.1f} tok/s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.splitlines()[0])
    parser.add_argument("--qwen35", type=Path, default=None,
                        help="a qwen35 (hybrid) GGUF; default: a tiny one built into ribbit's cache (once)")
    parser.add_argument("--model", type=model_path, default=None,
                        help="the first model: a GGUF, or frognano (bench.quantize's); default: the embedded GGUF")
    parser.add_argument("--no-qwen35", action="store_true", help="the first model only (e.g. real size with --model)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--decode-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--call-tokens", type=int, default=128)
    parser.add_argument("--copy-tokens", type=int, default=300)
    parser.add_argument("--mtp-tokens", type=int, default=64)
    parser.add_argument("--settings-prompt", type=int, default=512, help="section 9's prefill length (the depth decode is timed at)")
    parser.add_argument("--settings", nargs="+", default=None, metavar="LABEL",
                        help="section 9: only these settings, by label (the first is the baseline)")
    parser.add_argument("--after-busy", type=float, default=0.0, help="also measure decode right after SECONDS of full load")
    parser.add_argument("--only", default=None, help="sections to run, e.g. 15 (default: all but 9 and d)")
    parser.add_argument("--depths", type=int, nargs="+", default=[1024, 4096, 8192], help="section d's depths")
    parser.add_argument("--depth-prompt", type=int, default=512, help="section d's message length in tokens")
    parser.add_argument("--depth-variants", nargs="*", default=[], choices=["ubatch 512", "plain weights"],
                        help="section d: llama.cpp settings the bare loop also runs with")
    args = parser.parse_args(argv)
    print(f"ribbit engine benchmark (load average {load_average()} on a shared machine; CPU-time ratios are the steadier figures)")
    report("--model" if args.model else "embedded", args.model or embedded_model_path(), args)
    if not args.no_qwen35:
        report("qwen35", args.qwen35 or tiny_qwen35(), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
