"""A tiny random-weight qwen35 (hybrid) GGUF built here with our converter, with the real Qwen3.5-4B chat
template (tests/data/Qwen3.5-4B.jinja, from llama.cpp's models/templates): the template FrogNano ships,
`enable_thinking` switch included. It writes meaningless text; it exists to run the hybrid code paths."""

from __future__ import annotations

import json
from pathlib import Path

QWEN35_TEMPLATE = (Path(__file__).resolve().parents[1] / "data" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")


def build_tiny_qwen35(folder: Path, chat_template: str | None = QWEN35_TEMPLATE, context: int = 8192) -> Path:
    """`context`: the trained context the GGUF declares (its tiny tokenizer spends ~3,300 tokens on
    ribbit's system prompt, so whole sessions need more than the converter tests' 1,024)."""
    from quantize.convert import convert_checkpoint
    from tests.quantize.checkpoints import make_qwen35

    folder.mkdir(parents=True, exist_ok=True)
    hf = make_qwen35(folder / "hf", mtp=False, vision=False)
    config = json.loads((hf / "config.json").read_text())
    config["max_position_embeddings"] = context
    (hf / "config.json").write_text(json.dumps(config))
    if chat_template is not None:
        (hf / "chat_template.jinja").write_text(chat_template, encoding="utf-8")  # the converter prefers it
    out = folder / "tiny-qwen35.gguf"
    convert_checkpoint(hf, out)
    return out
