from versions import is_newer, latest


def test_simple():
    assert is_newer("1.4.2", "1.4.1")
    assert not is_newer("1.4.1", "1.4.2")


def test_latest_simple():
    assert latest(["0.1", "0.3", "0.2"]) == "0.3"
