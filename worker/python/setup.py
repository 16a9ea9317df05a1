# SPDX-License-Identifier: BSD-3-Clause
"""The wheel's tag: pbox is Python over ctypes (any CPython 3), but it
carries libpbox.so.3, an x86-64 Linux library: py3-none-linux_x86_64."""
from setuptools import setup
from wheel.bdist_wheel import bdist_wheel


class _Wheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False  # a shared library inside

    def get_tag(self):
        return "py3", "none", "linux_x86_64"


setup(cmdclass={"bdist_wheel": _Wheel})
