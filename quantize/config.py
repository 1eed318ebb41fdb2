"""config.json parsing: the boundary where an HF checkpoint's hyper-parameters enter.

Pydantic validates the fields the converter relies on, so a malformed or partial config fails
here, with the file named, instead of as a KeyError deep in the tensor plan.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from quantize.errors import QuantizeError


class Arch(str, Enum):
    """The llama.cpp architectures the converter writes."""

    QWEN35 = "qwen35"
    QWEN3 = "qwen3"
    LLAMA = "llama"


# HF class name -> llama.cpp architecture. Qwen3.5's multimodal class carries the text model
# under text_config; only that part is converted.
HF_ARCHITECTURES: dict[str, Arch] = {
    "Qwen3_5ForConditionalGeneration": Arch.QWEN35,
    "Qwen3_5ForCausalLM": Arch.QWEN35,
    "Qwen3ForCausalLM": Arch.QWEN3,
    "LlamaForCausalLM": Arch.LLAMA,
}


class TextConfig(BaseModel):
    """The language-model hyper-parameters (flat config, or Qwen3.5's ``text_config``)."""

    model_config = ConfigDict(extra="allow")

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 4096
    rope_theta: float | None = None
    rope_parameters: dict[str, Any] | None = None
    rope_scaling: dict[str, Any] | None = None
    partial_rotary_factor: float | None = None
    tie_word_embeddings: bool | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    bos_token_id: int | list[int] | None = None
    eos_token_id: int | list[int] | None = None
    # Qwen3.5 hybrid (Gated DeltaNet) fields
    layer_types: list[str] | None = None
    full_attention_interval: int | None = None
    linear_conv_kernel_dim: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    mtp_num_hidden_layers: int = 0

    @property
    def n_kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def rope(self) -> dict[str, Any]:
        """Rope settings, whichever of the transformers 4 / 5 spellings the file uses."""
        merged: dict[str, Any] = dict(self.rope_scaling or {})
        merged.update(self.rope_parameters or {})
        if "rope_theta" not in merged and self.rope_theta is not None:
            merged["rope_theta"] = self.rope_theta
        if "partial_rotary_factor" not in merged and self.partial_rotary_factor is not None:
            merged["partial_rotary_factor"] = self.partial_rotary_factor
        return merged


class CheckpointConfig(BaseModel):
    """A whole config.json: the architecture plus the text model's parameters."""

    model_config = ConfigDict(extra="allow")

    architectures: list[str]
    arch: Arch
    text: TextConfig
    tie_word_embeddings: bool
    name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _split_text_config(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise ValueError("config.json must hold a JSON object")
        archs = raw.get("architectures")
        if not isinstance(archs, list) or not archs:
            raise ValueError("no 'architectures' list")
        hf_arch = archs[0]
        if hf_arch not in HF_ARCHITECTURES:
            supported = ", ".join(f"{k} ({v.value})" for k, v in HF_ARCHITECTURES.items())
            raise ValueError(f"architecture {hf_arch!r} is not supported; supported: {supported}")
        text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
        tie = text.get("tie_word_embeddings", raw.get("tie_word_embeddings"))
        return {
            "architectures": archs,
            "arch": HF_ARCHITECTURES[hf_arch],
            "text": text,
            "tie_word_embeddings": bool(tie) if tie is not None else False,
            "name": raw.get("_name_or_path") or None,
        }


def load_config(src: Path) -> CheckpointConfig:
    path = src / "config.json"
    if not path.is_file():
        raise QuantizeError("missing (is this a Hugging Face checkpoint directory?)", path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QuantizeError(f"not readable JSON ({exc})", path) from None
    try:
        return CheckpointConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "__root__")
        msg = first.get("msg", "invalid").removeprefix("Value error, ")
        raise QuantizeError(f"{where + ': ' if where else ''}{msg}", path) from None
