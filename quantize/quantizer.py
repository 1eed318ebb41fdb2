"""Unquantised GGUF -> quantised GGUF through llama.cpp's own quantiser (llama_model_quantize)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from quantize.convert import check_free_disk, partial_path
from quantize.errors import QuantizeError
from quantize.progress import ProgressBar

# ribbit type name -> llama_ftype (llama.h); BF16 is the converter's own output, no requantising
FTYPES: dict[str, int] = {"Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "Q8_0": 7}
QUANT_TYPES: tuple[str, ...] = (*FTYPES, "BF16")
# average bits per weight, for the free-disk check before starting
_BITS_PER_WEIGHT = {"Q4_K_M": 4.9, "Q5_K_M": 5.7, "Q6_K": 6.6, "Q8_0": 8.5}


def bytes_per_param(qtype: str) -> float:
    return _BITS_PER_WEIGHT.get(qtype, 16.0) / 8


def estimated_size(n_params: int, qtype: str) -> int:
    return int(n_params * bytes_per_param(qtype))


def quantize_gguf(
    src: Path | str, out: Path | str, qtype: str = "Q4_K_M", *, imatrix: Path | str | None = None,
    n_params: int | None = None, progress: bool = False, requantize: bool = False,
) -> Path:
    """Quantise ``src`` (BF16/F16/F32 GGUF) to ``out``; atomic like the converter.

    `requantize` lets ``src`` be quantised already (llama.cpp refuses that by default, as a second
    rounding loses precision; Q4_1 -> Q8_0 loses next to none)."""
    src, out = Path(src), Path(out)
    if qtype not in FTYPES:
        raise QuantizeError(f"unknown quantisation type {qtype!r} (choose from {', '.join(QUANT_TYPES)})")
    if not src.is_file():
        raise QuantizeError("missing", src)
    out.parent.mkdir(parents=True, exist_ok=True)
    if n_params is not None:
        check_free_disk(out.parent, estimated_size(n_params, qtype), f"the {qtype} GGUF")
    tmp = partial_path(out)
    cmd = [sys.executable, "-m", "quantize._quantize_worker", *(["--requantize"] if requantize else []),
           str(src), str(tmp), str(FTYPES[qtype])]
    if imatrix is not None:
        cmd.append(str(Path(imatrix)))
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    bar: ProgressBar | None = None
    errors: list[str] = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                kind, _, rest = line.strip().partition(" ")
                if kind == "PROGRESS":
                    i, n = (int(x) for x in rest.split())
                    if progress:
                        bar = bar or ProgressBar("quantize", n, unit="tensors")
                        bar.set(i)
                elif kind == "ERROR" and rest:
                    errors.append(rest)
            stderr = proc.stderr.read() if proc.stderr else ""
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if rc != 0:
            why = errors[-1] if errors else (stderr.strip().splitlines() or [f"exit status {rc}"])[-1]
            raise QuantizeError(f"llama.cpp quantisation to {qtype} failed: {why}", src)
        if bar:
            bar.finish()
        with tmp.open("rb") as written:  # on disk before it takes the final name: no truncated result after a crash
            os.fsync(written.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
