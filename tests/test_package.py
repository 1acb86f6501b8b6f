"""The installed layout: `dnmopd.kernels` is the dnmopd/kernels/ folder (an ordinary subpackage, no import hook),
and nothing installs a top-level `kernels` module."""

import importlib.util
import pathlib
import subprocess
import sys


def test_kernels_is_a_subpackage_of_the_installed_dnmopd():
    import dnmopd
    import dnmopd.kernels

    assert pathlib.Path(dnmopd.kernels.__file__).parent.parent == pathlib.Path(dnmopd.__file__).parent


def test_no_top_level_kernels_module(tmp_path):
    # run from an empty folder so that the checkout is not on sys.path
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('kernels') is not None)"
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path).returncode == 0
    assert importlib.util.find_spec("dnmopd.kernels") is not None


def test_a_source_checkout_imports_its_own_kernels_and_samples():
    # `python -c` in the checkout root imports the source tree, not the install
    root = pathlib.Path(__file__).resolve().parents[1]
    code = ("import dnmopd, dnmopd.kernels, pathlib; from dnmopd.data.sample_data import sample_dir; "
            "print(pathlib.Path(dnmopd.kernels.__file__).parent, sample_dir())")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(root / "dnmopd" / "kernels"), str(root / "data" / "samples")]
