"""Carry a Hugging Face byte-level BPE tokenizer (tokenizer.json) into GGUF metadata.

llama.cpp does not run the HF pre-tokenizer; it re-implements a fixed set of them, picked by
``tokenizer.ggml.pre``. Upstream picks it by hashing token ids (which needs transformers); here
the pre-tokenizer's split regex is matched against the ones llama.cpp implements, so an
unfamiliar tokenizer is refused instead of silently tokenising differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGUFWriter, TokenType

from quantize.errors import QuantizeError

# tokenizer.json split regex -> llama.cpp pre-tokenizer name (llama-vocab.cpp)
QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
PRE_TOKENIZERS: dict[str, str] = {
    QWEN35_REGEX: "qwen35",
    QWEN2_REGEX: "qwen2",
    LLAMA3_REGEX: "llama-bpe",
}
_SPECIAL_KINDS = ("bos", "eos", "unk", "pad")


@dataclass
class TokenizerSpec:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    pre: str
    special_ids: dict[str, int] = field(default_factory=dict)
    add_bos: bool = False
    add_eos: bool = False
    chat_template: str | None = None

    def write(self, writer: GGUFWriter) -> None:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(self.pre)
        writer.add_token_list(self.tokens)
        writer.add_token_types(self.token_types)
        writer.add_token_merges(self.merges)
        for kind, tid in self.special_ids.items():
            key = "padding" if kind == "pad" else kind
            writer.add_uint32(f"tokenizer.ggml.{key}_token_id", tid)
        writer.add_bool("tokenizer.ggml.add_bos_token", self.add_bos)
        writer.add_bool("tokenizer.ggml.add_eos_token", self.add_eos)
        if self.chat_template is not None:
            writer.add_string("tokenizer.chat_template", self.chat_template)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QuantizeError(f"not readable JSON ({exc})", path) from None


def detect_pre_tokenizer(tok: dict[str, Any], path: Path) -> str:
    pre = tok.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        pattern = (steps[0].get("pattern") or {}).get("Regex")
        if pattern in PRE_TOKENIZERS:
            return PRE_TOKENIZERS[pattern]
        raise QuantizeError(
            f"unknown tokenizer: pre-tokenizer regex {pattern!r} is not one llama.cpp implements "
            f"(known: {', '.join(sorted(set(PRE_TOKENIZERS.values())))}, gpt-2)",
            path,
        )
    raise QuantizeError(f"unknown tokenizer: pre-tokenizer {kinds} is not a supported byte-level BPE", path)


def _token_content(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def _merges(model: dict[str, Any], path: Path) -> list[str]:
    merges = model.get("merges") or []
    out: list[str] = []
    for m in merges:
        if isinstance(m, str):
            out.append(m)
        elif isinstance(m, list) and len(m) == 2:
            # transformers >= 4.45 writes pairs; llama.cpp splits on the first space, and a
            # byte-level BPE never has a literal space inside a token (it is Ġ)
            out.append(f"{m[0]} {m[1]}")
        else:
            raise QuantizeError("unknown tokenizer: malformed BPE merges", path)
    return out


def read_tokenizer(src: Path, vocab_size: int, config_eos: int | list[int] | None) -> TokenizerSpec:
    path = src / "tokenizer.json"
    if not path.is_file():
        raise QuantizeError("missing (a fast tokenizer is required)", path)
    tok = _load_json(path)
    model = tok.get("model") if isinstance(tok, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        kind = model.get("type") if isinstance(model, dict) else None
        raise QuantizeError(f"unknown tokenizer: model type {kind!r}, only byte-level BPE is supported", path)
    pre = detect_pre_tokenizer(tok, path)

    vocab: dict[str, int] = dict(model["vocab"])
    added = [a for a in tok.get("added_tokens") or [] if isinstance(a, dict)]
    for a in added:
        vocab[a["content"]] = int(a["id"])
    top = max(vocab.values(), default=-1)
    if top >= vocab_size:
        raise QuantizeError(f"token id {top} does not fit the model's vocab_size {vocab_size} (config.json)", path)

    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [int(TokenType.UNUSED)] * vocab_size
    for text, tid in model["vocab"].items():
        tokens[tid] = text
        types[tid] = int(TokenType.NORMAL)
    for a in added:
        tid = int(a["id"])
        tokens[tid] = a["content"]
        types[tid] = int(TokenType.CONTROL if a.get("special") else TokenType.USER_DEFINED)

    tc_path = src / "tokenizer_config.json"
    tc: dict[str, Any] = _load_json(tc_path) if tc_path.is_file() else {}
    special: dict[str, int] = {}
    for kind in _SPECIAL_KINDS:
        content = _token_content(tc.get(f"{kind}_token"))
        if content is not None:
            if content not in vocab:
                raise QuantizeError(f"{kind}_token {content!r} is not in tokenizer.json", tc_path)
            special[kind] = vocab[content]
    if "eos" not in special and config_eos is not None:
        special["eos"] = config_eos[0] if isinstance(config_eos, list) else config_eos

    add_bos = tc.get("add_bos_token")
    if not isinstance(add_bos, bool):
        add_bos = _post_processor_adds_bos(tok)
    add_eos = bool(tc.get("add_eos_token", False))
    return TokenizerSpec(
        tokens=tokens,
        token_types=types,
        merges=_merges(model, path),
        pre=pre,
        special_ids=special,
        add_bos=add_bos,
        add_eos=add_eos,
        chat_template=_chat_template(src, tc),
    )


def _post_processor_adds_bos(tok: dict[str, Any]) -> bool:
    post = tok.get("post_processor") or {}
    for proc in post.get("processors", [post]):
        if proc.get("type") == "TemplateProcessing":
            single = proc.get("single") or []
            return bool(single) and "SpecialToken" in single[0]
    return False


def _chat_template(src: Path, tc: dict[str, Any]) -> str | None:
    # transformers 5 writes the template beside the tokenizer; older checkpoints inline it
    jinja = src / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = tc.get("chat_template")
    if isinstance(template, str):
        return template
    if isinstance(template, list):  # named templates: keep the default one
        for t in template:
            if isinstance(t, dict) and t.get("name") == "default":
                return str(t.get("template"))
    legacy = src / "chat_template.json"
    if legacy.is_file():
        value = _load_json(legacy).get("chat_template")
        return value if isinstance(value, str) else None
    return None
