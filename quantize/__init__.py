"""HF safetensors -> GGUF conversion and llama.cpp quantisation (`ribbit quantize`), numpy-only at
run time; apart from the agent (it imports neither agent nor app)."""

from quantize.convert import ConvertResult, convert_checkpoint
from quantize.errors import QuantizeError
from quantize.quantizer import QUANT_TYPES, quantize_gguf

__all__ = ["QUANT_TYPES", "ConvertResult", "QuantizeError", "convert_checkpoint", "quantize_gguf"]
