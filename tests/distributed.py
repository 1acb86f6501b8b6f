"""Run a function on N local processes joined in a gloo process group.

    results = run_workers(2, my_module_level_fn, arg1, arg2)

`fn(rank, world_size, *args)` runs in a fresh spawned process after
`torch.distributed.init_process_group("gloo")`, inside `cpu_compat()` (megatron-core on a CPU); its return
value (picklable) comes back in rank order.
An exception in any rank fails the call with that rank's traceback; a hang fails it after `timeout`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import traceback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, fn, args, queue):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",
    )
    import torch
    import torch.distributed as dist

    from dnmopd.student.cpu_compat import cpu_compat

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        with cpu_compat():
            result = fn(rank, world_size, *args)
        queue.put((rank, True, result))
    except BaseException:  # noqa: BLE001 - the traceback is the payload
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_workers(world_size: int, fn, *args, timeout: float = 300.0) -> list:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(rank, world_size, port, fn, args, queue), daemon=True)
        for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    errors: list[str] = []
    try:
        for _ in range(world_size):
            rank, ok, payload = queue.get(timeout=timeout)
            if ok:
                results[rank] = payload
            else:
                errors.append(f"rank {rank}:\n{payload}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if errors:
        raise RuntimeError("distributed worker failed\n" + "\n".join(errors))
    return [results[r] for r in range(world_size)]
