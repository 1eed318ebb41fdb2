"""HF safetensors -> GGUF conversion and llama.cpp quantisation (numpy-only at run time)."""

from quantize.convert import ConvertResult, convert_checkpoint
from quantize.errors import QuantizeError
from quantize.quantizer import QUANT_TYPES, quantize_gguf

__all__ = ["QUANT_TYPES", "ConvertResult", "QuantizeError", "convert_checkpoint", "quantize_gguf"]
