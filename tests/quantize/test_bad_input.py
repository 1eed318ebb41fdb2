"""Every bad input is one line on stderr naming the file, exit code 1, and no output left behind."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.git import tracked_files
from quantize.cli import quantize_main

PREFIX = "ribbit quantize: error: "


@pytest.fixture
def ckpt(checkpoints: Callable, tmp_path: Path) -> Path:
    """A private copy of the tiny Qwen3 checkpoint to break."""
    return Path(shutil.copytree(checkpoints("qwen3"), tmp_path / "ckpt"))


def run_failing(args: list[str], capsys: pytest.CaptureFixture[str], out_dir: Path) -> str:
    out_dir.mkdir(exist_ok=True)
    rc = quantize_main([*args, "-o", str(out_dir / "model.gguf"), "--type", "Q8_0"], list_tracked=tracked_files)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith(PREFIX)]
    assert rc == 1, err
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err  # progress lines may precede it
    assert "Traceback" not in err
    assert list(out_dir.iterdir()) == [], "partial output left behind"
    return errors[0]


def test_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_failing([str(tmp_path / "nope")], capsys, tmp_path / "out")
    assert "nope" in line


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_missing_file(name: str, ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (ckpt / name).unlink()
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert (name if name != "model.safetensors" else "safetensors") in line


def test_truncated_safetensors(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = ckpt / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 1000])
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "model.safetensors" in line and "truncated" in line


def test_corrupt_safetensors_header(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = ckpt / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[8:20] = b"#not json!!#"
    f.write_bytes(bytes(data))
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "model.safetensors" in line and "corrupt" in line


def test_config_disagrees_with_tensor_shapes(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (ckpt / "config.json").write_text(json.dumps(cfg))
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "model.safetensors" in line and "mlp" in line and "config.json implies" in line


def test_config_with_more_layers_than_the_checkpoint(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (ckpt / "config.json").write_text(json.dumps(cfg))
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "config.json" in line and "model.layers.2." in line


def test_unsupported_architecture_names_the_supported_ones(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["architectures"] = ["MistralForCausalLM"]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "config.json" in line and "MistralForCausalLM" in line
    assert all(a in line for a in ("qwen35", "qwen3", "llama"))


def test_unknown_pre_tokenizer(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = json.loads((ckpt / "tokenizer.json").read_text())
    tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\w+|\s+"
    (ckpt / "tokenizer.json").write_text(json.dumps(tok))
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "tokenizer.json" in line and "unknown tokenizer" in line


def test_non_bpe_tokenizer(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = json.loads((ckpt / "tokenizer.json").read_text())
    tok["model"]["type"] = "Unigram"
    (ckpt / "tokenizer.json").write_text(json.dumps(tok))
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "tokenizer.json" in line and "Unigram" in line


def test_not_enough_disk(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import quantize.convert as convert

    monkeypatch.setattr(convert.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - 1000, 1000))
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "not enough free disk" in line


def test_failure_mid_write_leaves_nothing(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import quantize.convert as convert

    real, calls = convert.tensor_chunks, []

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 5:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(convert, "tensor_chunks", failing)
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "No space left on device" in line


def test_interrupt_mid_write_leaves_nothing(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import quantize.convert as convert

    real, calls = convert.tensor_chunks, []

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(convert, "tensor_chunks", interrupted)
    out = tmp_path / "out"
    out.mkdir()
    rc = quantize_main([str(ckpt), "-o", str(out / "m.gguf")])
    err = capsys.readouterr().err
    assert rc == 130
    assert err.strip().splitlines()[-1] == f"{PREFIX}interrupted; no partial output was left behind"
    assert list(out.iterdir()) == []


def test_missing_imatrix(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_failing([str(ckpt), "--imatrix", str(tmp_path / "none.gguf")], capsys, tmp_path / "out")
    assert "none.gguf" in line


def test_usage_error_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert quantize_main(["x", "--type", "Q3_K"]) == 2
    assert capsys.readouterr().err.startswith(PREFIX)


def test_disk_check_reserves_room_for_the_quantised_file(
    ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import quantize.convert as convert

    # room for the tiny BF16 GGUF (~0.3 MB over the 256 MiB margin) but not also for its Q8_0 copy
    free = 256 * 1024 * 1024 + 420_000
    monkeypatch.setattr(convert.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - free, free))
    out = tmp_path / "ok"
    out.mkdir()
    assert quantize_main([str(ckpt), "-o", str(out / "m.gguf"), "--type", "BF16"]) == 0
    capsys.readouterr()
    line = run_failing([str(ckpt)], capsys, tmp_path / "out")
    assert "not enough free disk for the GGUF and its quantised copy" in line
