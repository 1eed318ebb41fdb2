import unittest

from pointer import resolve


class EscapeTest(unittest.TestCase):
    doc = {"a/b": 1, "m~n": 2, "~1": 3}

    def test_slash(self):
        self.assertEqual(resolve(self.doc, "/a~1b"), 1)

    def test_tilde(self):
        self.assertEqual(resolve(self.doc, "/m~0n"), 2)

    def test_order(self):
        self.assertEqual(resolve(self.doc, "/~01"), 3)
