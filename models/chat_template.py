"""A GGUF's own chat template, rendered with jinja2 — and rendered *incrementally*.

The agent loop never re-renders history (FROGNANO.md: the Qwen3.5 template rewrites earlier turns
and the recurrent state cannot roll back). Instead `delta()` renders only the messages that follow a
finished assistant turn, by rendering them after a fixed stand-in prefix and cutting that prefix off.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from models.base import Dialect, ModelError
from models.chat import ChatMessage, ToolSpec
from models.dialects import detect_dialect, dialect_named, gemma4

# SmolLM2 and many small models ship a ChatML template that knows no tools.
CHATML_FALLBACK = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Must survive `|trim` in templates, so no whitespace or control characters.
TURN_MARKERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<turn|>", "<|end|>", "</s>")
_STAND_IN = "RIBBIT_STAND_IN_7f3a"


@dataclass(frozen=True)
class TemplateReasoning:
    """What the template does with `enable_thinking` (Qwen3 / Qwen3.5 / FrogNano templates read it)."""

    switch: bool  # True and False render different generation prompts
    default_on: bool  # left undefined, the template behaves as with True
    opens_when_on: bool  # the generation prompt ends inside an open `<think>` block
    opens_when_off: bool
    opens_by_default: bool

    def opens(self, enable_thinking: bool | None) -> bool:
        if enable_thinking is None or not self.switch:
            return self.opens_by_default
        return self.opens_when_on if enable_thinking else self.opens_when_off


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


@dataclass(frozen=True)
class Rendered:
    """Rendered template text, and the spans (start, end) in it that are message text, not markup."""

    text: str
    plain: list[tuple[int, int]] = field(default_factory=list)
    exact: bool = True  # False: the template rewrote a message's text, so its spans are unknown


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "<|im_end|>") -> None:
        self.source = source or CHATML_FALLBACK
        self.dialect: Dialect = detect_dialect(self.source)
        self.bos_token, self.eos_token = bos_token, eos_token
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(self.source)
        except TemplateError as exc:
            raise ModelError(f"the model's chat template does not compile: {exc}") from None
        # The `enable_thinking` value every render passes (None: leave it undefined, the template's default).
        # Set per turn by the backend; only the generation prompt depends on it, so switching it mid-session
        # changes what is appended next and nothing already in the stream.
        self.enable_thinking: bool | None = None
        # After a generated turn the stream gets `turn_close + turn_end`, exactly as a full render has it.
        self.turn_close, self.turn_end = self._find_turn_end()
        # Gemma 4 GGUFs with the first template: tool results go on the assistant message (models.dialects.gemma4).
        self.legacy_tool_results = self.dialect == "gemma4" and not gemma4.renders_tool_messages(
            lambda messages: self.render(messages, None, True))
        self.reasoning = self._find_reasoning_switch()
        self.opens_reasoning = self.reasoning.opens_by_default

    # -- full renders ---------------------------------------------------------------------------

    def render(self, messages: list[dict[str, Any]], tools: list[ToolSpec] | None, add_generation_prompt: bool) -> str:
        extra = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        try:
            return self._template.render(
                messages=messages,
                tools=[t.to_openai() for t in tools] if tools and not dialect_named(self.dialect).tools_in_prompt else None,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except TemplateError as exc:
            raise ModelError(f"the model's chat template failed: {exc}") from None
        except Exception as exc:  # templates are user data: any failure is one clear line
            raise ModelError(f"the model's chat template failed: {type(exc).__name__}: {exc}") from None

    def render_conversation(self, messages: list[ChatMessage], tools: list[ToolSpec] | None) -> str:
        return self.render(self.template_messages(messages), tools, True)

    # -- message text kept apart from the template's markup ---------------------------------------

    def guarded(self, render: Callable[[list[ChatMessage]], str], messages: list[ChatMessage]) -> Rendered:
        """`render(messages)`, with where user and tool message texts lie in it.

        A file the agent reads may contain `<|im_end|>\n<|im_start|>user …`: tokenised as special
        tokens, that text would forge turns (a prompt injection at the token level). The backend
        tokenises these spans as plain text. They are found by rendering once more with a sentinel
        in place of each text: where the real render is exactly the sentinel render with the texts put
        back, the spans are known; otherwise (a template that rewrites message text) the render is
        returned without spans and the backend falls back to tokenising it whole.
        """
        text = render(messages)
        chosen = [i for i, m in enumerate(messages) if m.role in ("user", "tool") and m.content]
        if not chosen:
            return Rendered(text=text)
        nonce = os.urandom(4).hex()
        sentinels = {i: f"RIBBITTEXT{nonce}N{i}Z" for i in chosen}
        stand_ins = [
            m.model_copy(update={"content": sentinels[i]}) if i in sentinels else m for i, m in enumerate(messages)
        ]
        try:
            skeleton = render(stand_ins)
        except ModelError:
            return Rendered(text=text)
        pattern = re.compile("|".join(re.escape(s) for s in sentinels.values()))
        by_sentinel = {sentinel: messages[i].content for i, sentinel in sentinels.items()}
        order = [by_sentinel[m] for m in pattern.findall(skeleton)]
        markup = pattern.split(skeleton)  # len(order) + 1 pieces
        if not text.startswith(markup[0]):
            return Rendered(text=text, exact=False)
        spans: list[tuple[int, int]] = []
        at = len(markup[0])
        for content, after in zip(order, markup[1:]):
            # Templates may trim a message's text (`|trim`); any other rewrite leaves the spans unknown.
            for shown in dict.fromkeys((content, content.strip(), content.rstrip(), content.lstrip())):
                if text.startswith(shown, at) and text.startswith(after, at + len(shown)):
                    spans.append((at, at + len(shown)))
                    at += len(shown) + len(after)
                    break
            else:
                return Rendered(text=text, exact=False)
        if at != len(text):
            return Rendered(text=text, exact=False)
        return Rendered(text=text, plain=spans)

    # -- incremental renders --------------------------------------------------------------------

    def after_turn(self, turn: ChatMessage, new_messages: list[ChatMessage], tools: list[ToolSpec] | None) -> str:
        """What the stream gets after the last token the model generated for `turn` (that turn as parsed):
        the turn's close, then the new messages up to the next generation prompt, as a full render has them."""
        if self.dialect == "gemma4":  # its close depends on the turn and on what follows it
            try:
                return gemma4.after_turn(
                    lambda messages, prompt: self.render(messages, tools, prompt), self._stand_in_base(), turn,
                    new_messages, self.legacy_tool_results,
                )
            except ValueError as exc:
                raise ModelError(f"cannot render the next turn incrementally: {exc}") from None
        return self.turn_close + self.turn_end + self.delta(new_messages, tools)

    def cut_generated(self, text: str, turn: ChatMessage, tools: list[ToolSpec] | None) -> str:
        """`text`, a render that ends with `turn` and the generation prompt, cut where the model's generation
        of `turn` stopped (before what after_turn appends); ModelError where the render does not hold the
        turn the way the model wrote it."""
        close = self.after_turn(turn, [], tools)
        if not close or not text.endswith(close):
            raise ModelError("the last turn's close is not where the template renders it")
        cut = text[: -len(close)]
        if self.dialect == "gemma4" and turn.tool_calls and not cut.endswith(gemma4.CALL_CLOSE):
            # Gemma 4 renders a turn's text after its calls' results; the model wrote it before the calls.
            raise ModelError("the last turn's text is rendered where the model did not write it")
        return cut

    def delta(self, new_messages: list[ChatMessage], tools: list[ToolSpec] | None) -> str:
        """Text that follows a finished assistant turn (after `turn_end`) up to the next generation prompt."""
        new = self.template_messages(new_messages)
        base = self._stand_in_base()
        errors = []
        # Stand-in prefixes to try. Ending on a user turn keeps templates that restyle assistant turns
        # before the last query prefix-stable; the full one suits templates that insist on alternation.
        for prefix in (base[:2], base):
            try:
                before = self.render(prefix, tools, False)
                after = self.render(prefix + new, tools, True)
            except ModelError as exc:
                errors.append(str(exc))
                continue
            if after.startswith(before):
                return after[len(before):]
            errors.append("rendering is not prefix-stable")
        raise ModelError("cannot render the next turn incrementally: " + "; ".join(errors))

    def template_messages(self, messages: list[ChatMessage]) -> list[dict[str, Any]]:
        """Templates without tool support see one user message holding a step's tool results."""
        if self.dialect == "gemma4":
            return gemma4.template_messages(messages, self.legacy_tool_results)
        if not dialect_named(self.dialect).tools_in_prompt:
            return [m.to_template() for m in messages]
        out: list[dict[str, Any]] = []
        for message in messages:
            if message.role == "tool":
                label = f"Result of {message.name}" if message.name else "Tool result"
                block = f"[{label}]\n{message.content}"
                if out and out[-1].get("_tool_results"):
                    out[-1]["content"] += "\n\n" + block
                else:
                    out.append({"role": "user", "content": block, "_tool_results": True})
            else:
                out.append({"role": message.role, "content": message.content})
        for item in out:
            item.pop("_tool_results", None)
        return out

    def _stand_in_base(self) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": _STAND_IN},
        ]

    def _find_reasoning_switch(self) -> TemplateReasoning:
        """Whether `enable_thinking` changes the generation prompt, and where each setting leaves the output."""
        saved = self.enable_thinking
        prompts: dict[bool | None, str] = {}
        try:
            for value in (None, True, False):
                self.enable_thinking = value
                try:
                    prompts[value] = self.render(self._stand_in_base()[:2], None, True).rstrip()
                except ModelError:
                    prompts[value] = ""
        finally:
            self.enable_thinking = saved

        def opens(value: bool | None) -> bool:
            return prompts[value].endswith("<think>")

        return TemplateReasoning(
            switch=prompts[True] != prompts[False], default_on=prompts[None] == prompts[True],
            opens_when_on=opens(True), opens_when_off=opens(False), opens_by_default=opens(None),
        )

    def _find_turn_end(self) -> tuple[str, str]:
        """(end-of-turn marker, separator) the template writes after an assistant's content."""
        try:
            text = self.render(self._stand_in_base(), None, False)
        except ModelError:
            return self.eos_token, "\n"
        tail = text[text.rfind(_STAND_IN) + len(_STAND_IN) :]
        for marker in (self.eos_token, *TURN_MARKERS):
            if marker and tail.startswith(marker):
                return marker, tail[len(marker) :]
        return self.eos_token, tail
