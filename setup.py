"""setuptools' half of `pip install .` (pyproject.toml says why setuptools): the extension
batchsim._core is built by this repository's own CMake build, not by setuptools' compiler.

By default the build configures a CMake build folder of its own under setuptools' build_temp,
with only what the module needs (no tests, benchmarks, CUDA calibration or fuzzers), for the
Python that runs pip, and builds the `batchsim_python` target there. BATCHSIM_CMAKE_BUILD_DIR
names an already configured build folder instead (for instance `build`, after
scripts/test.sh): its `batchsim_python` target is brought up to date and packaged as it is,
without reconfiguring it, which turns a reinstall into seconds.

plots/ (the report's figure scripts, which `batchsim.compare` runs) is packaged as
batchsim/plots, and the package points BATCHSIM_PLOTS_DIR there unless it is set.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent


class CMakeExtension(Extension):
    """An extension whose sources CMake knows: setuptools compiles nothing itself."""

    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = self._cmake_build_dir()
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", ext.target, "-j", jobs], check=True)
        # The module CMake built is named for the Python it was built for (its EXT_SUFFIX), so a
        # build folder configured for another Python is refused rather than packaged.
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = build_dir / "python" / "batchsim" / ("_core" + suffix)
        if not built.is_file():
            others = sorted(p.name for p in (build_dir / "python" / "batchsim").glob("_core*"))
            raise SystemExit(
                f"batchsim: {built} was not built: the CMake build folder {build_dir} built "
                f"{', '.join(others) or 'no module'} (for another Python than {sys.executable}, "
                f"which needs {suffix}); configure it with -DPython_EXECUTABLE={sys.executable}")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)

    def _cmake_build_dir(self):
        given = os.environ.get("BATCHSIM_CMAKE_BUILD_DIR")
        if given:
            build_dir = pathlib.Path(given).resolve()
            if not (build_dir / "CMakeCache.txt").is_file():
                raise SystemExit(f"batchsim: BATCHSIM_CMAKE_BUILD_DIR={given}: not a configured CMake "
                                 f"build folder (no CMakeCache.txt in {build_dir})")
            return build_dir
        build_dir = pathlib.Path(self.build_temp).resolve() / "cmake"
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                     "-DBATCHSIM_PYTHON=ON", "-DBATCHSIM_BUILD_TESTS=OFF", "-DBATCHSIM_BUILD_BENCH=OFF",
                     "-DBATCHSIM_WITH_CUDA=OFF", f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.run(configure, check=True)
        return build_dir


class BuildPyWithPlots(build_py):
    def run(self):
        super().run()
        plots = pathlib.Path(self.build_lib) / "batchsim" / "plots"
        plots.mkdir(parents=True, exist_ok=True)
        for script in sorted((ROOT / "plots").glob("*.py")):
            shutil.copyfile(script, plots / script.name)


setup(
    ext_modules=[CMakeExtension("batchsim._core", target="batchsim_python")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithPlots},
    # setuptools' default build folder is ./build, which is this repository's CMake build.
    options={"build": {"build_base": "build/setuptools"}, "egg_info": {"egg_base": "build/setuptools"}},
)
