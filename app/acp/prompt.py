"""An editor's prompt (text, `@file` links, embedded selections and buffers) as the task text the model
reads. A linked file inside the repository is shown as Read shows it (numbered lines, cut to the same output
budget, counted as read); embedded text is cut to that budget too. Images and audio are refused: the
models ribbit runs read text."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from acp.schema import (
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

# Zed and others name a selection as a fragment: file:///a/b.py#L10:20 (or #L10-20, #L10).
LINES = re.compile(r"L?(\d+)(?:[:-]L?(\d+))?")


class PromptError(ValueError):
    """One line for the editor: why this prompt cannot be sent."""


class Attachments(Protocol):
    """What the prompt needs of the session (agent.session.Workspace has both)."""

    def read_for_prompt(self, path: str, offset: int | None = None, limit: int | None = None) -> str: ...

    def fit_for_prompt(self, text: str) -> str: ...


def file_path(uri: str) -> tuple[str | None, int | None, int | None]:
    """(path, first line, line count) of a file: URI (or a plain path); (None, ...) for anything else."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return None, None, None
    path = unquote(parsed.path)
    if not path:
        return None, None, None
    match = LINES.fullmatch(parsed.fragment) if parsed.fragment else None
    if match is None:
        return path, None, None
    first = max(1, int(match.group(1)))
    last = int(match.group(2)) if match.group(2) else first
    return path, first, max(1, last - first + 1)


def shown_path(root: Path, path: str) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return path


def attached(kind: str, name: str, body: str) -> str:
    return f'<{kind} path="{name}">\n{body.rstrip(chr(10))}\n</{kind}>'


def prompt_text(blocks: list[Any], root: Path, workspace: Attachments) -> str:
    """The task text for the model; PromptError for content it cannot read or a prompt with nothing in it."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            path, first, count = file_path(block.uri)
            if path is None:
                parts.append(f"(linked: {block.uri})")
                continue
            parts.append(attached("file", shown_path(root, path), workspace.read_for_prompt(path, first, count)))
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            path, first, _count = file_path(resource.uri)
            name = shown_path(root, path) if path else resource.uri
            if isinstance(resource, TextResourceContents):
                where = f" (from line {first})" if first else ""
                parts.append(attached("selection" if first else "file", name + where, workspace.fit_for_prompt(resource.text)))
            elif isinstance(resource, BlobResourceContents):
                parts.append(f"(attached binary content {name} is not shown: the model reads text only)")
        else:
            kind = getattr(block, "type", type(block).__name__)
            raise PromptError(f"ribbit's models read text only; this prompt has {kind} content")
    text = "\n\n".join(part for part in parts if part)
    if not text.strip():
        raise PromptError("the prompt is empty")
    return text
