"""The native half of `pip install ./python`: builds libmoegen.so (the
CMake target moegen_shared of the repository one level up) and puts it into
the package. The library is loaded with ctypes and links no Python or
PyTorch, so the wheel is tagged py3-none-<platform>: one build serves every
Python and every PyTorch version. CMAKE_ARGS (space-separated) is passed to
the configure step; MOEGEN_BUILD_JOBS sets the parallel build (default 2)."""
import os
import shlex
import shutil
import subprocess

from setuptools import setup
try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildNative(build_py):
    def run(self):
        super().run()
        build = os.path.join(os.path.abspath(self.build_lib), "..", "moegen-cmake")
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                               "-DMOEGEN_BUILD_TESTS=OFF", "-DMOEGEN_BUILD_EXAMPLES=OFF",
                               "-DMOEGEN_BUILD_PYTHON=ON"]
                              + shlex.split(os.environ.get("CMAKE_ARGS", "")))
        subprocess.check_call(["cmake", "--build", build, "--target", "moegen_shared", "-j",
                               os.environ.get("MOEGEN_BUILD_JOBS", "2")])
        dest = os.path.join(self.build_lib, "moegen")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.join(build, "python", "libmoegen.so"), dest)


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(cmdclass={"build_py": BuildNative, "bdist_wheel": PlatformWheel})
