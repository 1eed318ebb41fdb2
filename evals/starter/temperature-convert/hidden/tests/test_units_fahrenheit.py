import unittest

from units import convert


class FahrenheitTest(unittest.TestCase):
    def test_f_to_c(self):
        self.assertEqual(convert(212, "F", "C"), 100.0)
        self.assertEqual(convert(32, "F", "C"), 0.0)
        self.assertEqual(convert(-40, "F", "C"), -40.0)

    def test_f_to_k(self):
        self.assertEqual(convert(32, "F", "K"), 273.15)
