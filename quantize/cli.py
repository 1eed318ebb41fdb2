"""``ribbit quantize SRC [-o OUT] [--type T] [--no-mtp] [--imatrix F] [--keep-intermediate] [--verify]``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from quantize.convert import convert_checkpoint
from quantize.errors import QuantizeError
from quantize.progress import end_line
from quantize.quantizer import QUANT_TYPES, bytes_per_param, quantize_gguf

PROG = "ribbit quantize"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Convert a Hugging Face BF16 safetensors checkpoint to a GGUF for llama.cpp.")
    p.add_argument("src", type=Path, metavar="SRC", help="checkpoint directory (config.json, *.safetensors, tokenizer.json)")
    p.add_argument("-o", "--output", type=Path, metavar="OUT.gguf", help="output file (default: ./<SRC name>-<TYPE>.gguf)")
    p.add_argument("--type", default="Q4_K_M", type=str.upper, choices=QUANT_TYPES, help="quantisation (default Q4_K_M)")
    p.add_argument("--no-mtp", action="store_true", help="drop the multi-token-prediction layers")
    p.add_argument("--imatrix", type=Path, metavar="FILE", help="importance matrix from llama-imatrix")
    p.add_argument("--keep-intermediate", action="store_true", help="keep the BF16 GGUF made before quantising")
    p.add_argument("--verify", action="store_true", help="load the result, generate, compare with transformers")
    return p


def _say(text: str) -> None:
    end_line()
    print(text, file=sys.stderr, flush=True)


class _Terminated(BaseException):
    pass


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the partial output is removed either way."""
    def raise_(signum: int, frame: FrameType | None) -> None:
        raise _Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, raise_)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def intermediate_path(out: Path) -> Path:
    stem = out.name[:-5] if out.name.endswith(".gguf") else out.name
    return out.with_name(f"{stem}.BF16.gguf")


def run(args: argparse.Namespace) -> None:
    src: Path = args.src
    qtype: str = args.type
    out: Path = args.output or Path.cwd() / f"{src.resolve().name}-{qtype}.gguf"
    started = time.monotonic()
    if args.imatrix is not None and not args.imatrix.is_file():
        raise QuantizeError("missing imatrix file", args.imatrix)
    if qtype == "BF16":
        res = convert_checkpoint(src, out, keep_mtp=not args.no_mtp, progress=True)
    else:
        mid = intermediate_path(out)
        res = convert_checkpoint(src, mid, keep_mtp=not args.no_mtp, progress=True,
                                 later_bytes_per_param=bytes_per_param(qtype))
        try:
            _say(f"converted {res.n_params / 1e9:.2f} B parameters to {mid.name}; quantising to {qtype}")
            quantize_gguf(mid, out, qtype, imatrix=args.imatrix, n_params=res.n_params, progress=True)
        finally:
            if not args.keep_intermediate:
                mid.unlink(missing_ok=True)
    size = out.stat().st_size
    mtp = f", {res.n_mtp_layers} MTP layer(s)" if res.n_mtp_layers else ""
    _say(f"wrote {out} ({size / 1e9:.2f} GB, {qtype}, {res.arch}{mtp}) in {time.monotonic() - started:.0f} s")
    if args.verify:
        from quantize.verify import run_verify

        run_verify(out, src, _say)


def quantize_main(argv: list[str]) -> int:
    """Entry point for ``ribbit quantize``; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as exc:
        _say(f"{PROG}: error: {exc}")
        return 2
    try:
        with _sigterm_as_interrupt():
            run(args)
    except QuantizeError as exc:
        _say(f"{PROG}: error: {exc}")
        return 1
    except (KeyboardInterrupt, _Terminated):
        _say(f"{PROG}: error: interrupted; no partial output was left behind")
        return 130
    except OSError as exc:
        _say(f"{PROG}: error: {exc.filename or ''}: {exc.strerror}".replace(": : ", ": "))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(quantize_main(sys.argv[1:]))
