"""``quantize_main`` end to end: types, intermediate file, imatrix, --verify, and import hygiene."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from quantize.cli import quantize_main
from quantize.imatrix import load_imatrix
from models.llama_runtime import open_for_logits as load_llama


def _types(path: Path) -> set[str]:
    return {t.tensor_type.name for t in GGUFReader(path).tensors}


def test_q8_0_without_keeping_the_intermediate(checkpoints: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.gguf"
    assert quantize_main([str(checkpoints("qwen3")), "-o", str(out), "--type", "Q8_0"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]
    assert _types(out) == {"Q8_0", "F32"}
    err = capsys.readouterr().err
    assert "convert" in err and "quantize" in err and "ETA" in err  # both phases report progress
    assert load_llama(out).n_vocab() > 0


def test_keep_intermediate_and_default_type(checkpoints: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert quantize_main([str(checkpoints("llama")), "--keep-intermediate"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama-Q4_K_M.BF16.gguf", "llama-Q4_K_M.gguf"]
    assert GGUFReader(tmp_path / "llama-Q4_K_M.gguf").fields["general.file_type"].contents() == 15  # Q4_K_M
    assert "BF16" in _types(tmp_path / "llama-Q4_K_M.BF16.gguf")


def test_bf16_type_is_the_converter_output(checkpoints: Callable, tmp_path: Path) -> None:
    out = tmp_path / "b.gguf"
    assert quantize_main([str(checkpoints("qwen35")), "-o", str(out), "--type", "bf16"]) == 0
    assert _types(out) == {"BF16", "F32"}
    assert list(tmp_path.iterdir()) == [out]


def _write_imatrix(path: Path, gguf_model: Path) -> None:
    w = GGUFWriter(path, "imatrix")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["synthetic"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    for t in GGUFReader(gguf_model).tensors:
        if len(t.shape) == 2 and t.name.endswith(".weight"):
            n_in = int(t.shape[0])
            w.add_tensor(f"{t.name}.in_sum2", np.linspace(0.5, 2.0, n_in, dtype=np.float32).reshape(1, n_in))
            w.add_tensor(f"{t.name}.counts", np.array([[4.0]], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_imatrix_is_loaded_and_used(checkpoints: Callable, converted: Callable, tmp_path: Path) -> None:
    imatrix = tmp_path / "imatrix.gguf"
    _write_imatrix(imatrix, converted("qwen3"))
    entries = load_imatrix(imatrix)
    first = next(iter(entries.values()))
    np.testing.assert_allclose(first[[0, -1]], [0.125, 0.5])  # sums / counts
    plain, weighted = tmp_path / "plain.gguf", tmp_path / "weighted.gguf"
    src = str(checkpoints("qwen3"))
    assert quantize_main([src, "-o", str(plain), "--type", "Q4_K_M"]) == 0
    assert quantize_main([src, "-o", str(weighted), "--type", "Q4_K_M", "--imatrix", str(imatrix)]) == 0
    a = {t.name: bytes(t.data) for t in GGUFReader(plain).tensors}
    b = {t.name: bytes(t.data) for t in GGUFReader(weighted).tensors}
    assert a.keys() == b.keys()
    assert any(a[n] != b[n] for n in a), "the importance matrix changed no quantised block"


@pytest.mark.slow  # --verify loads the GGUF in llama.cpp and generates from it (inside quantize_main)
def test_verify_reports_generation_and_agreement(checkpoints: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v.gguf"
    assert quantize_main([str(checkpoints("qwen35")), "-o", str(out), "--type", "Q8_0", "--verify"], load_for_verify=load_llama) == 0
    err = capsys.readouterr().err
    assert "generated 8 tokens" in err
    line = next(line for line in err.splitlines() if "vs transformers" in line)
    agree, total = (int(x) for x in line.split("top-1 agreement ")[1].split()[0].split("/"))
    assert total > 0 and agree / total >= 0.8, line
