"""`replay:FILE.jsonl` — recorded raw model outputs, one assistant turn per line: {"text": "..."}.

A product feature (reproduce a session) and the tests' deterministic model. After the last line
the model answers with no tool call. Token counts are estimates (4 characters a token): nothing is
evaluated, but the usage events keep the shape of a real append-only session.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from models.base import Chunk, GenerationRequest, ModelError, ModelInfo, TextChunk, TurnEnd, Usage, estimate_tokens
from models.chat import ChatMessage, ToolSpec
from models.dialects import detect_dialect
from models.saved_points import META_LIMIT, PointMeta, read_meta, read_saved_file, write_meta

_PIECES = re.compile(r"\s*\S+|\s+")


def load_turns(path: Path) -> list[str]:
    if not path.is_file():
        raise ModelError(f"replay file {path} does not exist")
    turns = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read replay file {path}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ModelError(f"{path}:{number}: not a JSON object") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ModelError(f'{path}:{number}: expected {{"text": "..."}}')
        turns.append(record["text"])
    return turns


class ReplayModel:
    def __init__(self, path: Path, chunk_delay: float = 0.0, final_text: str = "") -> None:
        self.path = path
        self.turns = load_turns(path)
        self.chunk_delay = chunk_delay
        self.final_text = final_text
        self.position = 0
        self._context = 0
        sample = "\n".join(self.turns)
        # No window of its own: the --context limit is the only one a replayed session has.
        self.info = ModelInfo(name=f"replay:{path.name}", path=str(path), dialect=detect_dialect(sample),
                              context_length=1 << 30)

    def prompt_tokens(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> int:
        return sum(estimate_tokens(m.content) + 4 for m in messages)

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        prompt = self.prompt_tokens(list(request.messages), list(request.tools))
        cached = min(self._context, prompt)
        text = self.turns[self.position] if self.position < len(self.turns) else self.final_text
        self.position += 1
        started = time.perf_counter()
        produced = 0
        finish = "stop"
        for piece in _PIECES.findall(text):
            if cut := request.cut_off(produced):
                finish = cut
                break
            if self.chunk_delay:
                time.sleep(self.chunk_delay)
            produced += 1
            yield TextChunk(piece)
        self._context = prompt + produced
        usage = Usage(
            prompt_tokens=prompt, cached_tokens=cached, evaluated_tokens=prompt - cached,
            completion_tokens=produced, decode_s=time.perf_counter() - started,
        )
        yield TurnEnd(finish_reason=finish, usage=usage)  # type: ignore[arg-type]

    def context_used(self) -> int:
        return self._context

    # A replayed session saves where it is in the recording: a resumed one goes on from the next line.

    def state_identity(self) -> str:
        try:
            stat = self.path.stat()
            return f"replay:{self.path.resolve()}|{stat.st_size}"
        except OSError:
            return f"replay:{self.path}"

    def save_point(self, path: Path) -> bool:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            temp.write_text(json.dumps({"position": self.position}))
            os.replace(temp, path)  # never written through whatever is at `path` (a link, a FIFO)
            write_meta(path, PointMeta(identity=self.state_identity(), n_tokens=self._context, consumed=["replay"]))
        except OSError:
            return False
        return True

    def load_point(self, path: Path, messages: list[ChatMessage]) -> str | None:
        meta = read_meta(path)
        if isinstance(meta, str):
            return meta
        if meta.identity != self.state_identity():
            return "it was saved with another model"
        try:
            position = json.loads(read_saved_file(path, META_LIMIT))["position"]
        except (OSError, ValueError, KeyError, TypeError):
            return "its saved state is corrupt"
        if not isinstance(position, int) or position < 0:
            return "its saved state is corrupt"
        self.position, self._context = position, meta.n_tokens
        return None

    def close(self) -> None:
        pass
