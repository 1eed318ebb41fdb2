import pytest

from roman import to_roman


def test_simple():
    assert to_roman(3) == "III"
    assert to_roman(8) == "VIII"
    assert to_roman(2026) == "MMXXVI"


def test_range():
    with pytest.raises(ValueError):
        to_roman(0)
