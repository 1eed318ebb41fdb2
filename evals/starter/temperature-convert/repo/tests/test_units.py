import unittest

from units import convert


class ConvertTest(unittest.TestCase):
    def test_c_to_f(self):
        self.assertEqual(convert(100, "C", "F"), 212.0)

    def test_c_to_k(self):
        self.assertEqual(convert(0, "C", "K"), 273.15)

    def test_unknown(self):
        with self.assertRaises(ValueError):
            convert(1, "C", "X")
