"""torchrun --nproc_per_node=2 student_checkpoint_worker.py HF_DIR CKPT_DIR RESULT_JSON

Saves the student's distributed checkpoint at TP=2, reloads it at TP=1 (DP=2) and at PP=2, and records the
logit differences. Run as a real torchrun job: megatron's checkpoint writer starts child processes, which the
daemonic ``run_workers`` processes may not.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist


def main(hf_dir: str, ckpt_dir: str, result_file: str) -> None:
    from dnmopd.student import BuildOptions, ParallelDims, Student, init_distributed
    from dnmopd.student.logits import forward_logits

    init_distributed()
    ids = torch.randint(0, 300, (2, 70), generator=torch.Generator().manual_seed(0))

    dims = ParallelDims.Config(tensor=2).build()
    saved = Student.from_hf(hf_dir, dims, BuildOptions(dtype="float32"))
    reference = forward_logits(saved, ids)
    saved.save_checkpoint(ckpt_dir, extra={"trainer": {"step": 80}})
    dims.destroy()

    results = {"saved_padded_vocab": saved.padded_vocab}
    for label, layout in {"tp1": {}, "pp2": {"pipeline": 2}}.items():
        dims = ParallelDims.Config(**layout).build()
        loaded = Student.from_checkpoint(ckpt_dir, dims)
        logits = forward_logits(loaded, ids)
        results[label] = None if logits is None else (logits - reference).abs().max().item()
        results[f"{label}_padded_vocab"] = loaded.padded_vocab
        results[f"{label}_extra"] = loaded.load_checkpoint(ckpt_dir, extra={"trainer": {"step": 0}})
        dims.destroy()

    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, results)
    if dist.get_rank() == 0:
        with open(result_file, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    from dnmopd.student.cpu_compat import cpu_compat

    with cpu_compat():
        main(*sys.argv[1:4])
