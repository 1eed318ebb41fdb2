"""A tiny random-weight qwen35 (hybrid) GGUF built here with our converter, with the real Qwen3.5-4B chat
template (tests/data/Qwen3.5-4B.jinja, from llama.cpp's models/templates): the template FrogNano ships,
`enable_thinking` switch included. It writes meaningless text; it exists to run the hybrid code paths."""

from __future__ import annotations

import json
from pathlib import Path

QWEN35_TEMPLATE = (Path(__file__).resolve().parents[1] / "data" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")


def ribbit_corpus() -> list[str]:
    """Text a session is made of (ribbit's system prompt, tool definitions, compaction's request, tool
    calls and results), for a tokenizer that spends about as many tokens on it as a real one."""
    from agent.core.compaction import RESTART, SUMMARY_REQUEST
    from agent.core.prompt import BASE
    from agent.core.tools import default_tools

    specs = [t.spec() for t in default_tools().values()]
    calls = [f"<tool_call>\n<function={t.name}>\n<parameter=file_path>\ncalc.py\n</parameter>\n</function>\n</tool_call>"
             for t in specs]
    return [BASE, SUMMARY_REQUEST, RESTART, *calls, *(json.dumps(t.to_openai()) for t in specs),
            *(t.description for t in specs), "def add(a, b):\n    return a + b\n", "     1\tdef add(a, b):\n"]


def build_tiny_qwen35(
    folder: Path, chat_template: str | None = QWEN35_TEMPLATE, context: int = 8192, rich_vocab: bool = False,
) -> Path:
    """`context`: the trained context the GGUF declares (its tiny tokenizer spends ~3,300 tokens on
    ribbit's system prompt, so whole sessions need more than the converter tests' 1,024). `rich_vocab`:
    a 4,000-token vocabulary trained on ribbit's own prompts as well (ribbit_corpus), so that a 4K window
    holds a session about as FrogNano's tokenizer would."""
    from quantize.convert import convert_checkpoint
    from tests.quantize.checkpoints import make_qwen35

    folder.mkdir(parents=True, exist_ok=True)
    extra = dict(vocab_size=4000, corpus=ribbit_corpus()) if rich_vocab else {}
    hf = make_qwen35(folder / "hf", mtp=False, vision=False, **extra)  # type: ignore[arg-type]
    config = json.loads((hf / "config.json").read_text())
    config["max_position_embeddings"] = context
    (hf / "config.json").write_text(json.dumps(config))
    if chat_template is not None:
        (hf / "chat_template.jinja").write_text(chat_template, encoding="utf-8")  # the converter prefers it
    out = folder / "tiny-qwen35.gguf"
    convert_checkpoint(hf, out)
    return out
