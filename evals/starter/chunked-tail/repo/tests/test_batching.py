from batching import chunked


def test_even():
    assert list(chunked([1, 2, 3, 4], 2)) == [[1, 2], [3, 4]]


def test_generator_input():
    assert list(chunked(iter(range(3)), 3)) == [[0, 1, 2]]
