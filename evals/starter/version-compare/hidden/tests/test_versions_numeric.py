from versions import is_newer, latest


def test_numeric_parts():
    assert is_newer("1.10.0", "1.9.2")
    assert not is_newer("1.9.2", "1.10.0")


def test_missing_parts_are_zero():
    assert not is_newer("1.2", "1.2.0")
    assert not is_newer("1.2.0", "1.2")
    assert is_newer("1.2.1", "1.2")


def test_latest_numeric():
    assert latest(["2.9", "2.10", "2.1"]) == "2.10"
