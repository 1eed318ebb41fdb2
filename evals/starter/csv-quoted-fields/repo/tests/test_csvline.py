from csvline import parse_line


def test_plain():
    assert parse_line("a,b,c") == ["a", "b", "c"]


def test_empty_fields():
    assert parse_line("a,,c,") == ["a", "", "c", ""]
