from slugs import slugify


def test_accents_become_ascii():
    assert slugify("Café au lait") == "cafe-au-lait"
    assert slugify("Crème brûlée") == "creme-brulee"


def test_no_ascii_form_dropped():
    assert slugify("naïve ☃ snow") == "naive-snow"
