"""The student of this rank: megatron model chunks + the HF architecture + what export needs.

    dims = ParallelDims.Config(tensor=2).build()
    student = Student.from_hf("Qwen3.5-2B", dims, BuildOptions())       # HF -> megatron
    hidden = student.chunks[-1](input_ids, return_hidden_states=True)  # last pipeline stage
    shard = student.output_shard()                                     # LM-head rows of this TP rank
    for name, tensor in student.hf_tensors(): ...                      # weight sync / export
    student.save_checkpoint("ckpt/step_100")
    student = Student.from_checkpoint("ckpt/step_100", dims)           # any TP/PP
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import torch

from dnmopd.student import checkpoint
from dnmopd.student.arch import StudentArch
from dnmopd.student.build import build_model_chunks, padded_vocab_size
from dnmopd.student.model import OutputShard, StudentModel
from dnmopd.student.options import BuildOptions
from dnmopd.student.parallel import ParallelDims
from dnmopd.student.weights import iter_hf_tensors, load_hf_weights


class Student:
    def __init__(
        self,
        chunks: list[StudentModel],
        arch: StudentArch,
        dims: ParallelDims,
        options: BuildOptions,
        *,
        padded_vocab: int,
        hf_dtypes: dict[str, str],
        base_model: str | None,
    ):
        self.chunks = chunks
        self.arch = arch
        self.dims = dims
        self.options = options
        self.padded_vocab = padded_vocab
        self.hf_dtypes = hf_dtypes
        self.base_model = base_model

    @classmethod
    def from_hf(cls, hf_path: str | Path, dims: ParallelDims, options: BuildOptions | None = None) -> Student:
        """Build the chunks of this rank and load their weights from an HF folder."""
        options = options or BuildOptions()
        arch = StudentArch.from_hf_dir(hf_path)
        padded = padded_vocab_size(arch.vocab_size, dims.tp_size, options.make_vocab_size_divisible_by)
        chunks = build_model_chunks(arch, options, dims, vocab_size_padded=padded)
        dtypes = load_hf_weights(chunks, hf_path, arch, dims, padded)
        base = str(Path(hf_path).resolve())
        return cls(chunks, arch, dims, options, padded_vocab=padded, hf_dtypes=dtypes, base_model=base)

    @classmethod
    def from_checkpoint(
        cls, directory: str | Path, dims: ParallelDims, options: BuildOptions | None = None
    ) -> Student:
        """Rebuild the student recorded in a checkpoint at this process's TP/PP layout and load it."""
        meta = checkpoint.read_metadata(directory)
        options = options or BuildOptions(**meta["build_options"])
        arch = StudentArch.from_hf_config(meta["hf_config"], where=f"{directory}/{checkpoint.METADATA_FILE}")
        padded = meta["padded_vocab_size"]
        if padded % dims.tp_size:
            raise ValueError(
                f"{directory}: padded vocabulary {padded} is not divisible by tensor parallel size {dims.tp_size}; "
                "load it at a TP size that divides it, or convert it through a Hugging Face folder"
            )
        chunks = build_model_chunks(arch, options, dims, vocab_size_padded=padded)
        checkpoint.load_checkpoint(chunks, directory)
        return cls(
            chunks, arch, dims, options, padded_vocab=padded, hf_dtypes=meta["hf_dtypes"], base_model=meta["base_model"]
        )

    @property
    def is_last_stage(self) -> bool:
        return self.chunks[-1].post_process

    def output_shard(self) -> OutputShard:
        """This TP rank's LM-head rows (last pipeline stage only); see :class:`OutputShard`."""
        return self.chunks[-1].output_shard()

    def hf_tensors(
        self, *, source_dtypes: bool = False, causal_lm_names: bool = False
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Full HF-named language-model tensors (TP-gathered, PP-broadcast); every rank must iterate.

        ``source_dtypes=True`` casts each tensor to its dtype in the original HF checkpoint (for export);
        otherwise tensors are in the training dtype, on the training device. ``causal_lm_names=True`` names
        them as the parameters of ``AutoModelForCausalLM`` (``model.*``) even for the VL checkpoint layout
        (``model.language_model.*``): use it to sync an in-process transformers rollout engine.
        """
        dtypes = self.hf_dtypes if source_dtypes else None
        return iter_hf_tensors(self.chunks, self.arch, self.dims, self.padded_vocab, dtypes, causal_lm_names)

    def metadata(self) -> dict:
        """What ``student.json`` records (see ``dnmopd.student.checkpoint``)."""
        options = {k: v for k, v in asdict(self.options).items() if k in BuildOptions.__dataclass_fields__}
        return {
            "hf_config": self.arch.hf_config,
            "padded_vocab_size": self.padded_vocab,
            "hf_dtypes": self.hf_dtypes,
            "base_model": self.base_model,
            "build_options": options,
            "saved_with": {"tensor": self.dims.tp_size, "pipeline": self.dims.pp_size, "chunks": self.dims.num_chunks},
        }

    def sharded_state_dict(self) -> dict:
        """megatron sharded state of the weights (``model`` or ``model0``, ``model1``, ... with VPP)."""
        return checkpoint.model_sharded_state_dict(self.chunks)

    def save_checkpoint(
        self, directory: str | Path, extra: dict | None = None, model_state: dict | None = None
    ) -> Path:
        """Atomic distributed checkpoint of the weights (+ ``extra`` sharded state); all ranks must call it.

        Pass ``model_state`` (from :meth:`sharded_state_dict`) when ``extra`` holds an optimizer state built
        from it, e.g. ``extra={"optimizer": optimizer.sharded_state_dict(model_state)}``.
        """
        return checkpoint.save_checkpoint(self.chunks, directory, self.metadata(), extra, model_state)

    def load_checkpoint(
        self, directory: str | Path, extra: dict | None = None, model_state: dict | None = None
    ) -> dict:
        """Load weights saved by :meth:`save_checkpoint` into the existing chunks; returns the loaded ``extra``."""
        return checkpoint.load_checkpoint(self.chunks, directory, extra, model_state)
