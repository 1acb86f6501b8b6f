"""Megatron data parallelism, optimizer and learning-rate schedule for the student.

Loss scaling convention: every loss this trainer hands to megatron's schedules is already this rank's share
of the global objective (normalized by the global response or token count), so

- `calculate_per_token_loss = True` (set where the model's TransformerConfig is built, `student.build`): the
  schedules neither divide by the number of micro-batches nor by a token count, and DDP sums gradients over
  data-parallel ranks instead of averaging them;
- `finalize_model_grads` runs without a token count (no further scaling), then sums over tensor-parallel ranks
  the gradients of the parameters that heads split over ranks share (`_finalize_grads`).

Summing the ranks' shares then gives exactly the gradient of the global objective.

A resumed run takes the optimizer's moments and step counts from the checkpoint and its hyperparameters (the LR
schedule, betas, eps, weight decay) from the config: the run manifest (`trainer/manifest.py`) refuses a changed
config unless `checkpoint.allow_changes` accepts it, and an accepted change then applies from the resumed step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch


@dataclass
class Optimization:
    model: list  # DDP-wrapped chunks
    optimizer: object
    scheduler: object

    def zero_grad(self) -> None:
        for chunk in self.model:
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()

    def step(self) -> tuple[bool, float | None]:
        """Optimizer step and LR schedule; returns (applied, global grad norm)."""
        applied, grad_norm, _ = self.optimizer.step()
        if applied:
            self.scheduler.step(increment=1)
        return applied, grad_norm

    def learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def state_dict(self) -> dict:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """The schedule's position (optimizer steps taken); its shape is this run's config (the scheduler is built
        to override the checkpoint's values), so the learning rate is the new schedule's at that step."""
        self.scheduler.load_state_dict(state["scheduler"])

    def load_optimizer_state(self, state: dict) -> None:
        """The checkpoint's optimizer state (moments, step counts) under this run's hyperparameters: loading
        would otherwise restore the saved param groups' lr bounds, betas, eps and weight decay."""
        configured = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state)
        for group, values in zip(self.optimizer.param_groups, configured, strict=True):
            group.update(values)


def _finalize_grads(finalize, tp_group, model, num_tokens, **kwargs):
    """megatron's finalize_model_grads (DP reduction, tied-embedding sync across stages) without the division by
    the token count that `calculate_per_token_loss` would otherwise apply (our losses are normalized already),
    then the sum over tensor-parallel ranks of each gradient marked `summed_over_tensor_parallel`: a parameter
    every head uses while the ranks split the heads (the Gated DeltaNet output norm's scale) gets from each rank
    only its heads' share. megatron-core sums that way only q/k layer norms, and other norms under sequence
    parallelism."""
    finalize(model, None, **kwargs)
    if tp_group.size() == 1:
        return
    grads = [param.main_grad for chunk in model for param in chunk.parameters()
             if getattr(param, "summed_over_tensor_parallel", False) and param.requires_grad]
    if grads:
        summed = torch._utils._flatten_dense_tensors(grads)
        torch.distributed.all_reduce(summed, group=tp_group)
        for grad, value in zip(grads, torch._utils._unflatten_dense_tensors(summed, grads), strict=True):
            grad.copy_(value)


def _init_sgd_state(optimizer, config=None) -> None:
    """SGD's momentum buffers, zero, where a step has not made them yet (what a resumed checkpoint loads into)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if not optimizer.state[param]:
                optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param.data)


def build_optimization(student, config, total_steps: int) -> Optimization:
    """Wrap the student's chunks in megatron DDP and build the optimizer and the LR schedule.

    config: `TrainerConfig.optimizer`; total_steps: optimizer steps of the whole run.
    """
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    on_gpu = torch.cuda.is_available()
    chunks = student.chunks
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=on_gpu,
                                               overlap_grad_reduce=False)
    model = [DistributedDataParallel(config=chunk.config, ddp_config=ddp_config, module=chunk,
                                     pg_collection=student.dims.pg) for chunk in chunks]
    model_config = chunks[0].config
    model_config.finalize_model_grads_func = partial(_finalize_grads, finalize_model_grads, student.dims.pg.tp)
    model_config.no_sync_func = [m.no_sync for m in model] if len(model) > 1 else model[0].no_sync
    dtype = next(chunks[0].parameters()).dtype
    optimizer_config = OptimizerConfig(
        optimizer=config.name, lr=config.lr, min_lr=config.min_lr, weight_decay=config.weight_decay,
        sgd_momentum=config.sgd_momentum,
        adam_beta1=config.adam_beta1, adam_beta2=config.adam_beta2, adam_eps=config.adam_eps,
        clip_grad=config.clip_grad, bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
        params_dtype=dtype, use_distributed_optimizer=on_gpu,
    )
    optimizer = get_megatron_optimizer(optimizer_config, model)
    if config.name == "sgd":  # megatron gives only Adam the state set-up a sharded checkpoint loads into
        for part in getattr(optimizer, "chained_optimizers", [optimizer]):
            part.init_state_fn = _init_sgd_state
    if dtype == torch.float16:
        model_config.grad_scale_func = optimizer.scale_loss
    warmup = min(config.lr_warmup_updates, max(total_steps - 1, 0))
    scheduler = OptimizerParamScheduler(
        optimizer, init_lr=0.0 if warmup else config.lr, max_lr=config.lr, min_lr=config.min_lr,
        lr_warmup_steps=warmup, lr_decay_steps=max(total_steps, warmup + 1), lr_decay_style=config.lr_decay_style,
        start_wd=config.weight_decay, end_wd=config.weight_decay, wd_incr_steps=max(total_steps, 1),
        wd_incr_style="constant", use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=True,
    )
    return Optimization(model, optimizer, scheduler)
