"""app.visible: what is escaped for the eye, and what is left alone."""

from __future__ import annotations

import pytest

from app.visible import visible


@pytest.mark.parametrize(("raw", "shown"), [
    ("admin\u200b", "admin\\u200b"),
    ("a\u200db", "a\\u200db"),  # a joiner between letters draws nothing
    ("e\ufe0f", "e\\ufe0f"),  # so does a presentation selector after a letter
    ("x\U000e0041y", "x\\U000e0041y"),  # tag characters
    ("\u3164\u115f\uffa0\u2800", "\\u3164\\u115f\\uffa0\\u2800"),  # blanks that are letters or symbols
    ("a\u00a0b\u2009c\u3000d", "a\\xa0b\\u2009c\\u3000d"),  # spaces other than the space
    ("user == \u0430dmin", "user == \\u0430dmin"),  # a Cyrillic а in a Latin word
    ("p\uff41ss", "p\\uff41ss"),  # a fullwidth letter in a Latin word
])
def test_invisible_and_look_alike_characters_are_escaped(raw: str, shown: str) -> None:
    assert visible(raw) == shown


@pytest.mark.parametrize("text", [
    "ok 👨\u200d👩\u200d👧 and 🏳\ufe0f\u200d🌈", "⚠\ufe0f careful", "Привет мир", "αβγ", "日本語のテキスト", "naïve café",
])
def test_emoji_sequences_and_words_in_one_script_are_left_alone(text: str) -> None:
    assert visible(text) == text


def test_the_models_prose_keeps_mixed_words_but_not_invisible_ones() -> None:
    assert visible("took 10μs", prose=True) == "took 10μs"
    assert visible("took 10μs") == "took 10\\u03bcs"
    assert visible("a\u200bb", prose=True) == "a\\u200bb"
