"""Each test that takes ``backend`` runs once per implementation of the ops (native torch, Triton)."""

import pytest
from dnmopd.kernels.utils import BACKEND_ENV
from kernel_reference import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, request.param)
    return request.param
