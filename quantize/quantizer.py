"""Unquantised GGUF -> quantised GGUF through llama.cpp's own quantiser (llama_model_quantize)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quantize.convert import check_free_disk, partial_path
from quantize.errors import QuantizeError
from quantize.worker import run_worker

@dataclass(frozen=True)
class QuantType:
    ftype: int  # llama_ftype (llama.h)
    bits: float  # average bits per weight, generous, for the free-disk check before starting
    needs_matrix: bool = False  # llama.cpp refuses it without an importance matrix


# ribbit type name -> how llama.cpp makes it; BF16 is the converter's own output, no requantising.
# Below 4 bits the importance matrix matters most (docs/quantize.md has the measured figures).
TYPES: dict[str, QuantType] = {
    "IQ3_XXS": QuantType(23, 3.6, needs_matrix=True),
    "Q2_K": QuantType(10, 3.6),
    "Q3_K_S": QuantType(11, 3.8),
    "Q3_K_M": QuantType(12, 4.2),
    "IQ4_XS": QuantType(30, 4.6),
    "Q4_K_M": QuantType(15, 4.9),
    "Q5_K_M": QuantType(17, 5.7),
    "Q6_K": QuantType(18, 6.6),
    "Q8_0": QuantType(7, 8.5),
}
QUANT_TYPES: tuple[str, ...] = (*TYPES, "BF16")
MATRIX_TYPES: tuple[str, ...] = tuple(name for name, t in TYPES.items() if t.needs_matrix)


def bytes_per_param(qtype: str) -> float:
    found = TYPES.get(qtype)
    return (found.bits if found else 16.0) / 8


def estimated_size(n_params: int, qtype: str) -> int:
    return int(n_params * bytes_per_param(qtype))


# tensor types a requantisation starts from without a second rounding worth a warning
_EXACT_SOURCES = frozenset({"F32", "F16", "BF16", "Q8_0"})


@dataclass(frozen=True)
class GgufSource:
    file_type: str  # its weights' type, as llama.cpp names file types: BF16, Q8_0, Q4_1...
    n_params: int
    quantised: bool  # llama.cpp must be allowed to requantise it

    @property
    def lossy_requantize(self) -> bool:
        return self.file_type not in _EXACT_SOURCES


def gguf_source(path: Path) -> GgufSource:
    """What a GGUF given as SRC holds; QuantizeError when it is not a model GGUF."""
    from gguf import GGUFReader, LlamaFileType

    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise QuantizeError("not a GGUF file (SRC is a checkpoint folder or a .gguf)", path)
    try:
        reader = GGUFReader(path)
    except Exception as exc:  # GGUFReader raises bare ValueErrors and struct errors
        raise QuantizeError(f"corrupt GGUF ({exc})", path) from None
    kinds = [t.tensor_type.name for t in reader.tensors if len(t.shape) >= 2]
    if not kinds or "general.architecture" not in reader.fields:
        raise QuantizeError("not a model GGUF (no architecture or no weight matrices)", path)
    field = reader.fields.get("general.file_type")
    try:
        file_type = LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_") if field else ""
    except ValueError:
        file_type = ""
    file_type = file_type.replace("ALL_F32", "F32") or max(set(kinds), key=kinds.count)
    n_params = sum(int(t.n_elements) for t in reader.tensors)
    return GgufSource(file_type, n_params, any(k not in ("F32", "F16", "BF16") for k in kinds))


def quantize_gguf(
    src: Path | str, out: Path | str, qtype: str = "Q4_K_M", *, imatrix: Path | str | None = None,
    n_params: int | None = None, progress: bool = False, requantize: bool = False,
    say: Callable[[str], None] | None = None,
) -> Path:
    """Quantise ``src`` (BF16/F16/F32 GGUF) to ``out``; atomic like the converter.

    `requantize` lets ``src`` be quantised already (llama.cpp refuses that by default, as a second
    rounding loses precision; Q4_1 -> Q8_0 loses next to none)."""
    src, out = Path(src), Path(out)
    kind = TYPES.get(qtype)
    if kind is None:
        raise QuantizeError(f"unknown quantisation type {qtype!r} (choose from {', '.join(TYPES)})")
    if kind.needs_matrix and imatrix is None:
        raise QuantizeError(f"{qtype} needs an importance matrix (--calibrate DIR or --imatrix FILE)")
    if not src.is_file():
        raise QuantizeError("missing", src)
    out.parent.mkdir(parents=True, exist_ok=True)
    if n_params is not None:
        check_free_disk(out.parent, estimated_size(n_params, qtype), f"the {qtype} GGUF")
    tmp = partial_path(out)
    flags = [*(["--requantize"] if requantize else []), *(["--cover"] if kind.needs_matrix else [])]
    args = [*flags, str(src), str(tmp), str(kind.ftype)]
    if imatrix is not None:
        args.append(str(Path(imatrix)))
    try:
        run_worker("quantize._quantize_worker", args, what=f"llama.cpp quantisation to {qtype}", about=src,
                   label="quantize", unit="tensors", progress=progress, say=say)
        with tmp.open("rb") as written:  # on disk before it takes the final name: no truncated result after a crash
            os.fsync(written.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
