"""The installed layout: `dnmopd.kernels` comes from the top-level kernels/ folder, and nothing
installs a top-level `kernels` module."""

import importlib.util
import pathlib
import subprocess
import sys


def test_kernels_is_a_subpackage_of_the_installed_dnmopd():
    import dnmopd.kernels

    import dnmopd

    assert pathlib.Path(dnmopd.kernels.__file__).parent.parent == pathlib.Path(dnmopd.__file__).parent


def test_no_top_level_kernels_module(tmp_path):
    # run from an empty folder so that the checkout is not on sys.path
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('kernels') is not None)"
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path).returncode == 0
    assert importlib.util.find_spec("dnmopd.kernels") is not None
