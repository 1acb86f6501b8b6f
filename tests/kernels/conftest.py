"""Each test that takes ``backend`` runs once per implementation of the ops (native torch, Triton)."""

import pytest
from kernel_reference import BACKENDS

from dnmopd.kernels.utils import BACKEND_ENV


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, request.param)
    return request.param
