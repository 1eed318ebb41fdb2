import unittest

from pointer import resolve


class ResolveTest(unittest.TestCase):
    doc = {"a": [{"b": 1}, {"b": 2}], "": "empty"}

    def test_whole(self):
        self.assertIs(resolve(self.doc, ""), self.doc)

    def test_path(self):
        self.assertEqual(resolve(self.doc, "/a/1/b"), 2)

    def test_bad(self):
        with self.assertRaises(ValueError):
            resolve(self.doc, "a")
