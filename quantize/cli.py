"""``ribbit quantize SRC [-o OUT] [--type T] [--no-mtp] [--calibrate DIR [--calibrate-tokens N] | --imatrix F]
[--keep-intermediate] [--verify]``; SRC is a Hugging Face checkpoint folder or a GGUF file."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from quantize.calibrate import DEFAULT_TOKENS, MIN_TOKENS, CalibrationText, ListTracked, calibrate, calibration_text
from quantize.convert import ConvertResult, convert_checkpoint
from quantize.errors import QuantizeError
from quantize.progress import end_line
from quantize.quantizer import MATRIX_TYPES, QUANT_TYPES, GgufSource, bytes_per_param, gguf_source, quantize_gguf

if TYPE_CHECKING:
    from quantize.verify import LlamaLoader

PROG = "ribbit quantize"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Convert a Hugging Face BF16 safetensors checkpoint (or requantise a GGUF) "
                "to a GGUF for llama.cpp.")
    p.add_argument("src", type=Path, metavar="SRC",
                   help="checkpoint directory (config.json, *.safetensors, tokenizer.json), or a GGUF file")
    p.add_argument("-o", "--output", type=Path, metavar="OUT.gguf", help="output file (default: ./<SRC name>-<TYPE>.gguf)")
    p.add_argument("--type", default="Q4_K_M", type=str.upper, choices=QUANT_TYPES, help="quantisation (default Q4_K_M)")
    p.add_argument("--no-mtp", action="store_true", help="drop the multi-token-prediction layers")
    matrix = p.add_mutually_exclusive_group()
    matrix.add_argument("--calibrate", type=Path, metavar="DIR",
                        help="compute an importance matrix from the text of DIR's git-tracked files, and use it")
    matrix.add_argument("--imatrix", type=Path, metavar="FILE", help="importance matrix from llama-imatrix or --calibrate")
    p.add_argument("--calibrate-tokens", type=int, metavar="N",
                   help=f"tokens of DIR's text to run the model over (default {DEFAULT_TOKENS})")
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
    return out.with_name(f"{_stem(out)}.BF16.gguf")


def matrix_path(out: Path) -> Path:
    """Where --calibrate saves its matrix: next to the output, for --imatrix or llama-quantize to reuse."""
    return out.with_name(f"{_stem(out)}.imatrix.gguf")


def _stem(path: Path) -> str:
    return path.name[:-5] if path.name.endswith(".gguf") else path.name


def _check_usage(args: argparse.Namespace, from_gguf: bool) -> None:
    """Refusals that need no file read: one line, exit 2, before anything long starts."""
    qtype: str = args.type
    if qtype in MATRIX_TYPES and args.calibrate is None and args.imatrix is None:
        raise _UsageError(f"{qtype} needs an importance matrix: add --calibrate DIR (or --imatrix FILE)")
    if qtype == "BF16" and (args.calibrate is not None or args.imatrix is not None):
        raise _UsageError("BF16 is not quantised: an importance matrix has no use there")
    if qtype == "BF16" and from_gguf:
        raise _UsageError("a GGUF SRC is requantised; --type BF16 converts a checkpoint folder")
    if args.calibrate_tokens is not None:
        if args.calibrate is None:
            raise _UsageError("--calibrate-tokens goes with --calibrate DIR")
        if args.calibrate_tokens < MIN_TOKENS:
            raise _UsageError(f"--calibrate-tokens must be at least {MIN_TOKENS} (got {args.calibrate_tokens})")
    args.calibrate_tokens = args.calibrate_tokens or DEFAULT_TOKENS
    out: Path | None = args.output
    if out is not None and out.is_dir():
        raise _UsageError(f"-o {out} is a folder: name the output file, e.g. -o {out / ('NAME-' + qtype + '.gguf')}")
    if out is not None and not out.parent.is_dir():
        raise _UsageError(f"-o {out}: the folder {out.parent} does not exist")


def human_size(size: int) -> str:
    """A file size a person reads at a glance: 9.31 GB, 138 MB, 12 KB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}" if unit == "GB" else f"{size / scale:.0f} {unit}"
    return f"{size} bytes"


def human_time(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def run(
    args: argparse.Namespace, load_for_verify: LlamaLoader | None = None, list_tracked: ListTracked | None = None,
) -> None:
    src: Path = args.src
    qtype: str = args.type
    from_gguf = src.is_file()
    if args.verify and load_for_verify is None:
        raise _UsageError("--verify needs llama.cpp: run it as `ribbit quantize`")
    if args.calibrate is not None and list_tracked is None:
        raise _UsageError("--calibrate needs git's list of tracked files: run it as `ribbit quantize`")
    _check_usage(args, from_gguf)
    name = _stem(src) if from_gguf else src.resolve().name
    out: Path = args.output or Path.cwd() / f"{name}-{qtype}.gguf"
    started = time.monotonic()
    if args.imatrix is not None and not args.imatrix.is_file():
        raise QuantizeError("missing imatrix file", args.imatrix)
    text: CalibrationText | None = None
    if args.calibrate is not None:  # checked before a conversion that may take minutes
        assert list_tracked is not None
        text = calibration_text(args.calibrate, args.calibrate_tokens, list_tracked)
    if from_gguf:
        source = gguf_source(src)
        if out.resolve() == src.resolve():
            raise QuantizeError("the output would overwrite SRC; name another with -o", out)
        if source.lossy_requantize:
            _say(f"warning: {src.name} is {source.file_type}: requantising it to {qtype} rounds rounded weights "
                 "again and loses quality (start from an F16/BF16 GGUF or the checkpoint where there is one)")
        _quantize(src, out, args, text, source)
        summary = f"{qtype}, from {source.file_type}"
    elif qtype == "BF16":
        res = convert_checkpoint(src, out, keep_mtp=not args.no_mtp, progress=True)
        summary = _converted(res)
    else:
        mid = intermediate_path(out)
        res = convert_checkpoint(src, mid, keep_mtp=not args.no_mtp, progress=True,
                                 later_bytes_per_param=bytes_per_param(qtype))
        try:
            _say(f"converted {res.n_params / 1e9:.2f} B parameters to {mid.name}; "
                 + ("calibrating, then " if text else "") + f"quantising to {qtype}")
            _quantize(mid, out, args, text, GgufSource("BF16", res.n_params, False))
        finally:
            if not args.keep_intermediate:
                mid.unlink(missing_ok=True)
        summary = _converted(res).replace("BF16", qtype, 1)
    _say(f"wrote {out} ({human_size(out.stat().st_size)}, {summary}) in {human_time(time.monotonic() - started)}")
    if args.verify:
        from quantize.verify import run_verify

        assert load_for_verify is not None
        run_verify(out, None if from_gguf else src, _say, load_for_verify)


def _converted(res: ConvertResult) -> str:
    mtp = f", {res.n_mtp_layers} MTP layer(s)" if res.n_mtp_layers else ""
    return f"BF16, {res.arch}{mtp}"


def _quantize(base: Path, out: Path, args: argparse.Namespace, text: CalibrationText | None, source: GgufSource) -> None:
    """Quantise the GGUF `base` to `out`, calibrating on `text` first when there is some."""
    matrix: Path | None = args.imatrix
    if text is not None:
        matrix = matrix_path(out)
        res = calibrate(base, text, matrix, tokens=args.calibrate_tokens, progress=True, say=lambda s: _say(f"calibrate: {s}"))
        _say(f"calibrated on {res.tokens:,} tokens of {len(text.files)} files ({text.dataset}) in {res.seconds:.0f} s: "
             f"{res.entries} weights; matrix saved as {matrix}")
    quantize_gguf(base, out, args.type, imatrix=matrix, n_params=source.n_params, progress=True,
                  requantize=source.quantised, say=lambda s: _say(f"quantize: {s}"))


def quantize_main(
    argv: list[str], *, load_for_verify: LlamaLoader | None = None, list_tracked: ListTracked | None = None,
) -> int:
    """Entry point for ``ribbit quantize``; returns the exit code. `load_for_verify`: how --verify loads
    the result with llama.cpp (the caller's: quantize never imports models); `list_tracked`: how
    --calibrate DIR learns what git tracks there (ribbit passes its hardened git: quantize never starts git)."""
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as exc:
        _say(f"{PROG}: error: {exc}")
        return 2
    try:
        with _sigterm_as_interrupt():
            run(args, load_for_verify, list_tracked)
    except _UsageError as exc:
        _say(f"{PROG}: error: {exc}")
        return 2
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
