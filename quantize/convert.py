"""HF safetensors checkpoint -> unquantised GGUF (BF16 / F16 / F32), streamed tensor by tensor.

Only one tensor (or, for the large pass-through ones, one chunk of rows) is in memory at a time;
the output is written under a temporary name and renamed when complete, so a failed or
interrupted run never leaves a file that looks finished.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from gguf import GGML_QUANT_VERSION, GGMLQuantizationType, GGUFType, GGUFWriter, LlamaFileType

from quantize.archs import Plan, TensorJob, build_plan, write_arch_metadata
from quantize.config import CheckpointConfig, load_config
from quantize.errors import QuantizeError
from quantize.progress import ProgressBar
from quantize.safetensors_source import Checkpoint, TensorEntry
from quantize.tokenizer import TokenizerSpec, read_tokenizer

WeightDtype = Literal["bf16", "f16", "f32"]
_CHUNK_BYTES = 64 * 1024 * 1024  # conversion granularity for big tensors
_GGML_TYPE = {"bf16": GGMLQuantizationType.BF16, "f16": GGMLQuantizationType.F16, "f32": GGMLQuantizationType.F32}
_FILE_TYPE = {"bf16": LlamaFileType.MOSTLY_BF16, "f16": LlamaFileType.MOSTLY_F16, "f32": LlamaFileType.ALL_F32}
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}
_DISK_MARGIN = 256 * 1024 * 1024


@dataclass(frozen=True)
class ConvertResult:
    path: Path
    arch: str
    n_tensors: int
    n_params: int
    n_bytes: int
    n_mtp_layers: int
    skipped: int  # checkpoint tensors not converted (vision tower, dropped MTP)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))  # round to nearest even
    return (rounded >> 16).astype(np.uint16)


def to_f32(raw: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_bits_to_f32(raw) if dtype == "BF16" else raw.astype(np.float32)


def _to_weight_dtype(raw: np.ndarray, src_dtype: str, out: WeightDtype) -> np.ndarray:
    """Raw checkpoint values (any source dtype) in the output encoding; a no-op BF16 -> BF16."""
    if out == "bf16":
        return raw if src_dtype == "BF16" else f32_to_bf16_bits(to_f32(raw, src_dtype))
    if out == "f16":
        return raw if src_dtype == "F16" else to_f32(raw, src_dtype).astype(np.float16)
    return raw if src_dtype == "F32" else to_f32(raw, src_dtype)


def tensor_chunks(
    job: TensorJob, entry: TensorEntry, raw: np.ndarray, out: WeightDtype,
    consumed: Callable[[int], None] = lambda n: None,
) -> Iterator[np.ndarray]:
    """The tensor's output bytes as one or more row blocks (pass-through tensors are chunked;
    ``consumed`` hears how many source bytes are done with, so their pages can be dropped)."""
    if job.f32:
        x = to_f32(raw, entry.dtype)
        yield np.ascontiguousarray(job.transform(x) if job.transform else x, dtype=np.float32)
        return
    if job.transform is not None:
        yield np.ascontiguousarray(_to_weight_dtype(job.transform(raw), entry.dtype, out))
        return
    rows = max(1, _CHUNK_BYTES // max(1, raw[0].nbytes * 2)) if raw.ndim > 1 else raw.shape[0]
    for start in range(0, raw.shape[0], rows):
        yield np.ascontiguousarray(_to_weight_dtype(raw[start:start + rows], entry.dtype, out))
        consumed(min(raw.shape[0], start + rows) * raw[0].nbytes)


def _job_nbytes(job: TensorJob, out: WeightDtype) -> int:
    n = int(np.prod(job.final_shape, dtype=np.int64))
    return n * (4 if job.f32 else _ITEMSIZE[out])


def check_free_disk(directory: Path, needed: int, what: str) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed + _DISK_MARGIN:
        raise QuantizeError(
            f"not enough free disk for {what}: need {(needed + _DISK_MARGIN) / 1e9:.2f} GB, have {free / 1e9:.2f} GB",
            directory,
        )


def partial_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.partial-{os.getpid()}")


def convert_checkpoint(
    src: Path | str,
    out: Path | str,
    *,
    weight_dtype: WeightDtype = "bf16",
    keep_mtp: bool = True,
    progress: bool = False,
    later_bytes_per_param: float = 0.0,
) -> ConvertResult:
    """Convert an HF checkpoint directory to an unquantised GGUF at ``out``.

    ``later_bytes_per_param`` reserves disk for what the caller writes next (the quantised file),
    so a run that cannot finish is refused before it starts. Raises QuantizeError (one line,
    naming the file) for every input problem.
    """
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise QuantizeError("not a directory (expected a Hugging Face checkpoint)", src)
    cfg = load_config(src)
    ckpt = Checkpoint(src)
    try:
        plan = build_plan(cfg, ckpt.entries, keep_mtp)
        tok = read_tokenizer(src, cfg.text.vocab_size, cfg.text.eos_token_id)
        total = sum(_job_nbytes(j, weight_dtype) for j in plan.jobs)
        out.parent.mkdir(parents=True, exist_ok=True)
        n_params = sum(int(np.prod(j.final_shape, dtype=np.int64)) for j in plan.jobs)
        needed = total + len(tok.tokens) * 16 + int(n_params * later_bytes_per_param)
        check_free_disk(out.parent, needed, "the GGUF" + (" and its quantised copy" if later_bytes_per_param else ""))
        tmp = partial_path(out)
        try:
            _write(tmp, out, cfg, plan, ckpt, tok, weight_dtype, total, progress)
            os.replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    finally:
        ckpt.close()
    return ConvertResult(out, cfg.arch.value, len(plan.jobs), n_params, out.stat().st_size, plan.n_mtp, len(plan.skipped))


def _write(
    tmp: Path, out: Path, cfg: CheckpointConfig, plan: Plan, ckpt: Checkpoint, tok: TokenizerSpec, weight_dtype: WeightDtype,
    total: int, progress: bool,
) -> None:
    w = GGUFWriter(tmp, cfg.arch.value)
    w.add_type(GGUFType.MODEL)
    w.add_name(cfg.name or ckpt.src.resolve().name)
    write_arch_metadata(w, cfg, plan)
    w.add_file_type(int(_FILE_TYPE[weight_dtype]))
    w.add_quantization_version(GGML_QUANT_VERSION)
    tok.write(w)
    for job in plan.jobs:
        ggml_type = GGMLQuantizationType.F32 if job.f32 else _GGML_TYPE[weight_dtype]
        w.add_tensor_info(job.dst, job.final_shape, np.dtype(np.float32), _job_nbytes(job, weight_dtype), ggml_type)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        bar = ProgressBar("convert", total) if progress else None
        assert w.fout is not None
        fout = w.fout[0]
        for job in plan.jobs:
            entry = ckpt.entries[job.src]
            raw = ckpt.array(job.src)
            w.write_padding(fout, fout.tell())  # each tensor starts aligned, as the infos promise
            written = 0
            for chunk in tensor_chunks(job, entry, raw, weight_dtype, lambda n, s=job.src: ckpt.release(s, n)):  # type: ignore[misc]
                chunk.tofile(fout)
                written += chunk.nbytes
                if bar:
                    bar.update(chunk.nbytes)
            if written != _job_nbytes(job, weight_dtype):
                raise AssertionError(f"{job.dst}: wrote {written} bytes")
            w.write_padding(fout, written)
            del raw
            ckpt.release(job.src)
        if bar:
            bar.finish()
        fout.flush()
        os.fsync(fout.fileno())
    except OSError as exc:
        raise QuantizeError(f"write failed ({exc.strerror})", out) from None
    finally:
        w.close()
