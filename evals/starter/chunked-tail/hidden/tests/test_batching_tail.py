import pytest

from batching import chunked


def test_last_short_chunk():
    assert list(chunked([1, 2, 3, 4, 5], 2)) == [[1, 2], [3, 4], [5]]


def test_empty():
    assert list(chunked([], 3)) == []


def test_bad_size():
    with pytest.raises(ValueError):
        list(chunked([1], 0))
