import unittest

from settings import load


class LoadTest(unittest.TestCase):
    def test_defaults(self):
        self.assertEqual(load({"port": 80}, {}), {"port": 80})

    def test_int_override(self):
        self.assertEqual(load({"port": 80}, {"APP_PORT": "8080"}), {"port": 8080})

    def test_str_override(self):
        self.assertEqual(load({"name": "x"}, {"APP_NAME": "y"}), {"name": "y"})
