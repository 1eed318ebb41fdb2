from slugs import slugify


def test_ascii():
    assert slugify("Hello, World!") == "hello-world"


def test_spaces_and_digits():
    assert slugify("  Python 3.11  release ") == "python-3-11-release"
