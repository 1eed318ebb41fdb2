from roman import to_roman


def test_four_and_nine():
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"


def test_larger():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(3999) == "MMMCMXCIX"
    assert to_roman(444) == "CDXLIV"
