from csvline import parse_line


def test_comma_inside_quotes():
    assert parse_line('a,"b,c",d') == ["a", "b,c", "d"]


def test_doubled_quote():
    assert parse_line('"say ""hi""",x') == ['say "hi"', "x"]
