"""The decode loop's own per-token work, on the embedded GGUF: token text read whole and memoised."""

from __future__ import annotations

from pathlib import Path

from models.chat import ChatMessage
from tests.engine.conftest import SYSTEM, make_model, run_turn


def test_a_token_longer_than_32_bytes_reaches_the_text_whole(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    try:
        indent = "\n" + " " * 32  # one token in SmolLM2's vocabulary, 33 bytes
        assert model.llm.tokenize(indent.encode(), add_bos=False, special=False) == [3299]
        assert model.llm.detokenize([3299]) == indent.encode()
        model.response_prefix = "def f():" + indent + "return 1"
        text, end, _ = run_turn(model, [SYSTEM, ChatMessage(role="user", content="Write f.")], max_tokens=1)
        assert text.startswith("def f():" + indent + "return 1")
        assert model.llm.detokenize(model.stream_tokens(), special=True).decode().endswith(text)
    finally:
        model.close()


def test_pieces_match_llama_cpp_for_every_short_token(tmp_path: Path) -> None:
    model = make_model(tmp_path)
    try:
        llm = model.llm
        for token in range(0, llm.n_vocab(), 7):
            for special in (True, False):
                piece = llm.piece(token, special)
                if len(piece) <= 32:  # where llama-cpp-python's own detokenize is right
                    assert piece == llm._model.detokenize([token], special=special) or token == llm.token_bos()
    finally:
        model.close()
