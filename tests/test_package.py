"""The installed layout: `dnmopd.kernels` is the dnmopd/kernels/ folder (an ordinary subpackage, no import hook),
and dnmopd installs no top-level `kernels` module."""

import importlib.metadata
import importlib.util
import pathlib
import subprocess
import sys


def test_kernels_is_a_subpackage_of_the_installed_dnmopd():
    import dnmopd
    import dnmopd.kernels

    assert pathlib.Path(dnmopd.kernels.__file__).parent.parent == pathlib.Path(dnmopd.__file__).parent


def test_no_top_level_kernels_module():
    # the name may be taken by another distribution (Hugging Face's `kernels`, which transformers >= 5.25
    # requires): dnmopd itself must install nothing there
    installed = [str(path) for path in importlib.metadata.files("dnmopd")]
    assert installed and not [path for path in installed if path.split("/")[0] in ("kernels", "kernels.py")]
    assert any(path.startswith("dnmopd/kernels/") for path in installed)
    assert "dnmopd" not in importlib.metadata.packages_distributions().get("kernels", [])
    assert importlib.util.find_spec("dnmopd.kernels") is not None


def test_a_source_checkout_imports_its_own_kernels_and_samples():
    # `python -c` in the checkout root imports the source tree, not the install
    root = pathlib.Path(__file__).resolve().parents[1]
    code = ("import dnmopd, dnmopd.kernels, pathlib; from dnmopd.data.sample_data import sample_dir; "
            "print(pathlib.Path(dnmopd.kernels.__file__).parent, sample_dir())")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(root / "dnmopd" / "kernels"), str(root / "data" / "samples")]
