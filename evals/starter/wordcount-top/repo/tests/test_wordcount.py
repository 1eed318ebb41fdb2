import io

from wordcount import count_words, main


def test_count_words():
    assert count_words("b a b") == [("b", 2), ("a", 1)]


def test_main_prints_all(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("the cat the hat a")
    out = io.StringIO()
    assert main([str(path)], out=out) == 0
    assert out.getvalue().splitlines() == ["the 2", "a 1", "cat 1", "hat 1"]
