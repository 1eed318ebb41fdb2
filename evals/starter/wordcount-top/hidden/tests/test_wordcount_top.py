import io

from wordcount import main


def test_top(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("the cat the hat a cat the")
    out = io.StringIO()
    assert main(["--top", "2", str(path)], out=out) == 0
    assert out.getvalue().splitlines() == ["the 3", "cat 2"]


def test_top_larger_than_words(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("one two")
    out = io.StringIO()
    assert main([str(path), "--top", "10"], out=out) == 0
    assert out.getvalue().splitlines() == ["one 1", "two 1"]
