"""What the benchmarks need on disk, made once and kept in ribbit's cache (`$XDG_CACHE_HOME/ribbit/bench`).

- Qwen's trained tokenizer vocabulary: llama.cpp's qwen35 test vocabulary (`ggml-vocab-qwen35.gguf`),
  taken out of the llama-cpp-python source archive of the installed version (`pip download`, once).
- The synthetic FrogNano (`python -m bench.quantize` writes it into `frognano/`).
- A tiny qwen35 GGUF built by our own converter, as the tests build it.

No path of one machine: everything lives under the cache folder or a temporary one.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from models.base import cache_folder

VOCAB_NAME = "ggml-vocab-qwen35.gguf"
VOCAB_MEMBER = "vendor/llama.cpp/models/" + VOCAB_NAME


def bench_folder() -> Path:
    return cache_folder("bench")


def frognano_folder() -> Path:
    """Where bench.quantize writes the synthetic FrogNano and bench.session, bench.reasoning read it."""
    return bench_folder() / "frognano"


def frognano_gguf(quant: str = "Q4_K_M") -> Path:
    return frognano_folder() / f"frognano-synthetic-{quant}.gguf"


def model_path(value: str) -> Path:
    """A benchmark's `--model` argument: a GGUF path, or `frognano` for the synthetic FrogNano."""
    return frognano_gguf() if value == "frognano" else Path(value).expanduser()


def llama_cpp_version() -> str:
    from importlib.metadata import version

    return version("llama-cpp-python")


def qwen_vocabulary(fetch: bool = True) -> Path | None:
    """Qwen's 151,643-token BPE with Qwen3.5's pre-tokenizer, as a vocabulary-only GGUF; fetched once
    from the installed llama-cpp-python's source archive (`fetch`), else None when it is not cached."""
    folder = bench_folder()
    target = folder / VOCAB_NAME
    if target.is_file():
        return target
    if not fetch:
        return None
    release = llama_cpp_version()
    archive = folder / f"llama_cpp_python-{release}.tar.gz"
    if not archive.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"fetching the llama-cpp-python {release} source archive for Qwen's tokenizer vocabulary (once)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={release}", "--no-binary", ":all:",
                        "--no-deps", "-q", "-d", str(folder)], check=True)
    extract_member(archive, VOCAB_MEMBER, target)
    return target


def extract_member(archive: Path, suffix: str, target: Path) -> None:
    """The one file of `archive` whose path ends with `suffix`, written atomically to `target`."""
    with tarfile.open(archive) as tar:
        member = next((m for m in tar.getmembers() if m.isfile() and m.name.endswith("/" + suffix)), None)
        if member is None:
            raise SystemExit(f"{archive.name} has no {suffix}")
        source = tar.extractfile(member)
        assert source is not None  # a regular file
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=target.name, suffix=".tmp", delete=False) as out:
            out.write(source.read())
        Path(out.name).chmod(0o644)
        Path(out.name).replace(target)


def tiny_qwen35() -> Path:
    """A tiny random qwen35 GGUF (hybrid Gated DeltaNet, with its MTP layer) as tests/engine builds it; once."""
    target = bench_folder() / "tiny-qwen35-f16.gguf"
    if target.is_file():
        return target
    from quantize.convert import convert_checkpoint
    from tests.quantize.checkpoints import make_qwen35

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiny-qwen35-", dir=target.parent) as tmp:
        source = make_qwen35(Path(tmp) / "checkpoint", mtp=True)
        built = convert_checkpoint(source, Path(tmp) / target.name, weight_dtype="f16")
        built.path.replace(target)
    return target
