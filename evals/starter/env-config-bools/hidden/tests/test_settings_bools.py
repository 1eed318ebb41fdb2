import unittest

from settings import load


class BoolTest(unittest.TestCase):
    def test_false_words(self):
        for word in ("false", "No", "OFF", "0"):
            self.assertEqual(load({"debug": True}, {"APP_DEBUG": word}), {"debug": False}, word)

    def test_true_words(self):
        for word in ("true", "YES", "on", "1"):
            self.assertEqual(load({"debug": False}, {"APP_DEBUG": word}), {"debug": True}, word)

    def test_bad_value(self):
        with self.assertRaises(ValueError) as caught:
            load({"debug": False}, {"APP_DEBUG": "maybe"})
        self.assertIn("debug", str(caught.exception))
