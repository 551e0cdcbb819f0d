"""pip install . (offline, with Debian's setuptools): builds fovea._fovea with CMake.

    pip install --no-build-isolation .          # in a venv made with --system-site-packages
    pip wheel --no-build-isolation --no-deps . -w dist/

Debian marks its Python externally managed (PEP 668): outside a venv, pip needs
--break-system-packages; `cmake --install build --component python` is the Debian-friendly way.
The build needs the same packages as the C++ build (scripts/install-deps.sh) plus pybind11-dev.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(fovea VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        cfg = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DFOVEA_BUILD_TESTS=OFF",
               "-DFOVEA_BUILD_BENCH=OFF", f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            cfg += ["-G", "Ninja"]
        if shutil.which("ccache"):
            cfg += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(cfg)
        subprocess.check_call(["cmake", "--build", build, "--target", "fovea_python", "-j", str(os.cpu_count() or 2)])
        built = glob.glob(os.path.join(build, "python", "fovea", "_fovea*.so"))
        if not built:
            raise RuntimeError("the CMake build produced no fovea/_fovea*.so")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    name="fovea",
    version=version(),
    description="Foveated visual tokens for vision-language models (pybind11 binding of the C++ library)",
    license="Apache-2.0",
    classifiers=["License :: OSI Approved :: Apache Software License"],
    packages=["fovea", "fovea.serve"],
    package_dir={"": "python"},
    package_data={"fovea": ["*.pyi", "py.typed"], "fovea.serve": ["*.html"]},
    ext_modules=[Extension("fovea._fovea", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    extras_require={"distributed": ["distributed"], "serve": ["fastapi", "uvicorn", "python-multipart"]},
    zip_safe=False,
)
