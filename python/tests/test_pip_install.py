"""`pip install .` (pyproject.toml, setup.py): the wheel setuptools builds installs into a virtual
environment and imports from there, anywhere, with the report's figure scripts inside it.

The install packages the module of the build folder ctest runs in (BATCHSIM_CMAKE_BUILD_DIR,
setup.py), so that the test takes seconds rather than a second full build; setup.py's other
path, a CMake build of its own, is what a user without a build folder gets (python/README.md
says how long it takes). The sources are copied to a temporary folder first, so that pip's
in-tree build writes nothing into the repository."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SOURCE_DIR, run_cli

BUILD_DIR = Path(os.environ.get("BATCHSIM_BUILD_DIR", SOURCE_DIR / "build"))
# What setup.py and pyproject.toml package: the pure-Python package, the figure scripts, the
# README that is the package's long description.
PACKAGED = ["pyproject.toml", "setup.py", "python/README.md", "python/batchsim", "plots"]


def _have_pip_and_venv():
    probe = subprocess.run([sys.executable, "-c", "import ensurepip, venv, setuptools, wheel"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if not _have_pip_and_venv():
        pytest.skip("needs venv, ensurepip, setuptools and wheel for this Python "
                    "(Debian: python3-venv python3-setuptools python3-wheel; scripts/setup-debian.sh)")
    root = tmp_path_factory.mktemp("pip")
    source = root / "source"
    for rel in PACKAGED:
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (SOURCE_DIR / rel).is_dir() else shutil.copyfile
        copy(SOURCE_DIR / rel, source / rel)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = dict(os.environ, BATCHSIM_CMAKE_BUILD_DIR=str(BUILD_DIR), PIP_NO_INDEX="1")
    env.pop("PYTHONPATH", None)  # the installed package, not build/python
    env.pop("BATCHSIM_PLOTS_DIR", None)
    r = subprocess.run([str(python), "-m", "pip", "install", "--no-build-isolation", "--no-deps", str(source)],
                       capture_output=True, text=True, env=env, cwd=root)
    assert r.returncode == 0, r.stdout + r.stderr
    return python, env, root


def test_the_installed_package_imports_from_the_environment_with_its_plots(installed):
    python, env, root = installed
    code = ("import batchsim, json, os; print(json.dumps({'file': batchsim.__file__, "
            "'version': batchsim.__version__, 'plots': os.environ.get('BATCHSIM_PLOTS_DIR')}))")
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True)
    seen = json.loads(r.stdout)
    site = Path(seen["file"]).resolve().parent.parent
    assert site.is_relative_to(root / "venv"), seen
    assert seen["version"] == __import__("batchsim").__version__
    assert sorted(p.name for p in Path(seen["plots"]).glob("*.py")) == \
        sorted(p.name for p in (SOURCE_DIR / "plots").glob("*.py"))


def test_the_installed_package_runs_as_the_cli(installed, tmp_path):
    python, env, root = installed
    code = ("import batchsim, json, sys; r = batchsim.run(policy='vllm', num_requests=60, "
            "arrival='poisson:8', seed=5); json.dump(r.summary, sys.stdout)")
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True)
    run_cli("run", "--policy", "vllm", "--num-requests", 60, "--arrival", "poisson:8", "--seed", 5,
            "--out", tmp_path)
    assert json.loads(r.stdout) == json.loads((tmp_path / "summary.json").read_text())


def test_a_build_folder_that_is_not_one_is_refused_by_name(tmp_path):
    if not _have_pip_and_venv():
        pytest.skip("needs venv, ensurepip, setuptools and wheel for this Python")
    env = dict(os.environ, BATCHSIM_CMAKE_BUILD_DIR=str(tmp_path / "nowhere"), PIP_NO_INDEX="1")
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "setup.py"), "build_ext", "--build-temp",
                        str(tmp_path / "t"), "--build-lib", str(tmp_path / "l")],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode != 0
    assert f"BATCHSIM_CMAKE_BUILD_DIR={tmp_path / 'nowhere'}: not a configured CMake build folder" in r.stderr
