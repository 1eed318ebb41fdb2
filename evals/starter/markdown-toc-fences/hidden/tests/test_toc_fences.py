from toc import headings


def test_backtick_fence():
    doc = "# Install\n```sh\n# run this\npip install x\n```\n## Use\n"
    assert headings(doc) == [(1, "Install"), (2, "Use")]


def test_tilde_fence():
    doc = "~~~python\n# a comment\n~~~\n# After\n"
    assert headings(doc) == [(1, "After")]
