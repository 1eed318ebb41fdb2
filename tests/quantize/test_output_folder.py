"""`-o` into a folder that does not exist yet makes it (as `mkdir -p`), as the README's
`ribbit quantize ... -o ~/models/frognano-q4_k_m.gguf` needs on a fresh machine (issue 40); a path through a
file is refused before anything is read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quantize.cli import quantize_main


def test_output_folder_is_made(checkpoints: Callable[[str], Path], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "models" / "deeper" / "m.gguf"
    assert quantize_main([str(checkpoints("qwen3")), "-o", str(out), "--type", "Q8_0"]) == 0
    assert out.read_bytes()[:4] == b"GGUF"


def test_output_folder_is_made_for_a_gguf_source_too(converted: Callable[[str, str], Path], tmp_path: Path) -> None:
    out = tmp_path / "models" / "m-q8.gguf"
    assert quantize_main([str(converted("qwen3", "bf16")), "-o", str(out), "--type", "Q8_0"]) == 0
    assert out.read_bytes()[:4] == b"GGUF"


def test_a_missing_source_makes_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "models" / "m.gguf"
    assert quantize_main([str(tmp_path / "FrogNano-4B-2609"), "-o", str(out)]) == 1
    assert "not a directory" in capsys.readouterr().err and not (tmp_path / "models").exists()


def test_output_under_a_file_is_refused(checkpoints: Callable[[str], Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "models"
    blocker.write_text("not a folder\n")
    assert quantize_main([str(checkpoints("qwen3")), "-o", str(blocker / "sub" / "m.gguf"), "--type", "Q8_0"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{blocker} is not a folder" in line
    assert blocker.read_text() == "not a folder\n" and sorted(p.name for p in tmp_path.iterdir()) == ["models"]
