"""dnmopd: Domain-Normalized Multi-Teacher On-Policy Distillation on megatron-core."""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

CHECKOUT = Path(__file__).resolve().parent.parent
"""The source checkout around this package (meaningful only when running from a checkout, not an install)."""


class _CheckoutKernels(importlib.abc.MetaPathFinder):
    """Run from a source checkout (e.g. `python -c ...` in its root, which puts the checkout first on sys.path),
    the top-level kernels/ folder is `dnmopd.kernels`, exactly as the wheel's package-dir mapping installs it."""

    def find_spec(self, name, path=None, target=None):
        if name != "dnmopd.kernels":
            return None
        folder = CHECKOUT / "kernels"
        return importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])


if not (Path(__file__).parent / "kernels").is_dir() and (CHECKOUT / "kernels" / "__init__.py").is_file():
    sys.meta_path.append(_CheckoutKernels())
