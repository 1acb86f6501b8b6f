"""Process groups for the student: the only module that touches megatron's ``parallel_state``.

    init_distributed()
    dims = ParallelDims.Config(tensor=2, pipeline=1).build()
    student = Student.from_hf(hf_path, dims)
    ...
    dims.destroy()

Everything else receives the groups explicitly (``dims.pg``, a megatron ``ProcessGroupCollection``); a test
(``tests/test_layout_rules.py``) fails if another module uses ``parallel_state``.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


def init_distributed(timeout_minutes: int = 30) -> None:
    """Initialise ``torch.distributed`` from torchrun's environment, or as a single process.

    NCCL when CUDA is available (the local rank picks the device), gloo otherwise (megatron-core then needs
    ``dnmopd.student.cpu_compat`` around the work). Does nothing if a group already exists.
    """
    if dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = datetime.timedelta(minutes=timeout_minutes)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend, timeout=timeout)
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, timeout=timeout
    )


class ParallelDims:
    """Tensor/pipeline/data-parallel layout of the student and its megatron process groups."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        tensor: int = 1
        """Tensor-parallel size (must divide attention heads, KV groups and GDN heads)."""
        pipeline: int = 1
        """Pipeline-parallel size (must divide the layer count, times ``virtual_pipeline``)."""
        virtual_pipeline: int | None = None
        """Model chunks per pipeline rank (interleaved schedule); None = one chunk."""
        seed: int = 1234
        """Seed of megatron's model-parallel RNG tracker (random init, dropout)."""

        def __post_init__(self):
            for name in ("tensor", "pipeline"):
                if getattr(self, name) < 1:
                    raise ValueError(f"ParallelDims.Config.{name} must be >= 1, got {getattr(self, name)}")
            if self.virtual_pipeline is not None:
                if self.virtual_pipeline < 2:
                    raise ValueError(
                        f"ParallelDims.Config.virtual_pipeline must be None or >= 2, got {self.virtual_pipeline}"
                    )
                if self.pipeline < 2:
                    raise ValueError("ParallelDims.Config.virtual_pipeline needs pipeline >= 2")

        def build(self) -> ParallelDims:
            return ParallelDims(self)

    def __init__(self, config: Config):
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.process_groups_config import ProcessGroupCollection

        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised; call init_distributed() first")
        world = dist.get_world_size()
        if world % (config.tensor * config.pipeline):
            raise ValueError(
                f"world size {world} is not divisible by tensor ({config.tensor}) x pipeline "
                f"({config.pipeline}) parallel sizes"
            )
        self.config = config
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=config.tensor,
            pipeline_model_parallel_size=config.pipeline,
            virtual_pipeline_model_parallel_size=config.virtual_pipeline,
        )
        tensor_parallel.model_parallel_cuda_manual_seed(config.seed)
        self.pg = ProcessGroupCollection.use_mpu_process_groups()
        self.data_parallel = world // (config.tensor * config.pipeline)

    @property
    def tp_rank(self) -> int:
        return self.pg.tp.rank()

    @property
    def tp_size(self) -> int:
        return self.pg.tp.size()

    @property
    def pp_rank(self) -> int:
        return self.pg.pp.rank()

    @property
    def pp_size(self) -> int:
        return self.pg.pp.size()

    @property
    def num_chunks(self) -> int:
        return self.config.virtual_pipeline or 1

    @property
    def dp_group(self):
        return self.pg.dp

    def pp_global_rank(self, pp_rank: int) -> int:
        """Global rank of the member of this rank's pipeline group at pipeline position ``pp_rank``."""
        return dist.get_process_group_ranks(self.pg.pp)[pp_rank]

    def destroy(self) -> None:
        """Tear down megatron's process groups (torch.distributed itself stays initialised)."""
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
