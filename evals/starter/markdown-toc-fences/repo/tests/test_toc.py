from toc import headings


def test_levels():
    doc = "# Title\n\ntext\n\n## Part one ##\n### Detail\n"
    assert headings(doc) == [(1, "Title"), (2, "Part one"), (3, "Detail")]


def test_not_a_heading():
    assert headings("#hashtag\nplain") == []
