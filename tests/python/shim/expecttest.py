# SPDX-License-Identifier: BSD-3-Clause
"""The two names of the expecttest package that torch 1.13's test base
(torch/testing/_internal/common_utils.py) takes at import: Debian 12 has no
python3-expecttest, and the distributed tests conformance.py runs use
neither. Only on conformance.py's path."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (torch's name)
        self.assertEqual(actual, expect)
