"""Build the student's model chunks: our options + the HF architecture -> megatron ``TransformerConfig``.

This is the only place that maps the student's settings onto megatron's ``TransformerConfig``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from megatron.core.transformer.transformer_config import TransformerConfig

from dnmopd.student.arch import StudentArch, dtype_from_name
from dnmopd.student.model import StudentModel
from dnmopd.student.options import BuildOptions
from dnmopd.student.parallel import ParallelDims
from dnmopd.student.specs import HAVE_TE, decoder_block_spec, spec_provider


def resolved_dtype(options: BuildOptions, arch: StudentArch) -> torch.dtype:
    """The parameter dtype `options.dtype` names ("auto": the checkpoint's)."""
    return arch.hf_dtype if options.dtype == "auto" else dtype_from_name(options.dtype, where="student.dtype")


def resolved_impl(options: BuildOptions) -> str:
    """The transformer implementation ("auto": Transformer Engine when importable and CUDA is available)."""
    if options.transformer_impl == "auto":
        return "transformer_engine" if HAVE_TE and torch.cuda.is_available() else "local"
    return options.transformer_impl


def padded_vocab_size(vocab_size: int, tp_size: int, divisible_by: int = 128) -> int:
    """Megatron's rule: round the vocabulary up to a multiple of ``divisible_by * tp_size``."""
    multiple = divisible_by * tp_size
    return math.ceil(vocab_size / multiple) * multiple


def check_supported(arch: StudentArch, dims: ParallelDims) -> None:
    """Layouts that the installed megatron-core cannot run correctly, rejected before building."""
    import megatron.core
    from packaging.version import Version

    if (
        arch.attn_output_gate
        and arch.num_query_groups < dims.tp_size
        and Version(megatron.core.__version__) < Version("0.19")
    ):
        raise ValueError(
            f"gated attention with fewer KV heads ({arch.num_query_groups}) than tensor-parallel ranks "
            f"({dims.tp_size}) needs megatron-core >= 0.19 ({megatron.core.__version__} does not slice the "
            f"output gate); use tensor parallel size <= {arch.num_query_groups}"
        )


def transformer_config(arch: StudentArch, options: BuildOptions, dims: ParallelDims) -> TransformerConfig:
    dtype = resolved_dtype(options, arch)
    on_gpu = torch.cuda.is_available()
    gdn = arch.gdn
    recompute = {}
    if options.activation_recompute:
        recompute = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    return TransformerConfig(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        ffn_hidden_size=arch.ffn_hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups,
        kv_channels=arch.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=arch.norm_eps,
        layernorm_zero_centered_gamma=arch.zero_centered_norms,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        qk_layernorm=True,
        attention_output_gate=arch.attn_output_gate,
        linear_conv_kernel_dim=gdn.conv_kernel if gdn else None,
        linear_key_head_dim=gdn.key_head_dim if gdn else None,
        linear_value_head_dim=gdn.value_head_dim if gdn else None,
        linear_num_key_heads=gdn.num_key_heads if gdn else None,
        linear_num_value_heads=gdn.num_value_heads if gdn else None,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=dims.tp_size,
        pipeline_model_parallel_size=dims.pp_size,
        virtual_pipeline_model_parallel_size=dims.config.virtual_pipeline,
        # the interleaved schedule must not batch both directions' messages into one exchange: with two stages
        # they would go to the same peer and could cross (megatron's training arguments enforce the same)
        overlap_p2p_comm=dims.num_chunks > 1,
        batch_p2p_comm=dims.num_chunks == 1,
        sequence_parallel=False,
        variable_seq_lengths=True,
        # our loss functions normalize themselves (by the global response or token count) and report one
        # "token" per micro-batch: megatron must not divide their losses by the micro-batch count again
        calculate_per_token_loss=True,
        moe_token_dispatcher_type="alltoall",  # dense model; megatron rejects the default with variable lengths
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=not on_gpu,
        # always on, also when weights are loaded afterwards: megatron's parallel layers set their
        # tensor-parallel attributes (which gradient-norm clipping relies on) only while initializing
        perform_initialization=True,
        bias_activation_fusion=on_gpu,
        bias_dropout_fusion=on_gpu,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        transformer_impl=resolved_impl(options),
        hetereogenous_dist_checkpoint=gdn is not None,  # mixed layer types: per-layer checkpoint keys
        **recompute,
    )


def build_model_chunks(
    arch: StudentArch,
    options: BuildOptions,
    dims: ParallelDims,
    *,
    vocab_size_padded: int | None = None,
) -> list[StudentModel]:
    """One randomly initialized :class:`StudentModel` per virtual pipeline stage of this rank (a single chunk
    without VPP)."""
    check_supported(arch, dims)
    config = transformer_config(arch, options, dims)
    provider = spec_provider(config.transformer_impl)
    padded = vocab_size_padded or padded_vocab_size(arch.vocab_size, dims.tp_size, options.make_vocab_size_divisible_by)
    if padded < arch.vocab_size or padded % dims.tp_size:
        raise ValueError(
            f"padded vocabulary {padded} must be >= vocab_size {arch.vocab_size} and divisible by TP {dims.tp_size}"
        )
    theta = int(arch.rope_theta) if float(arch.rope_theta).is_integer() else arch.rope_theta
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    chunks = []
    for vp in range(dims.num_chunks):
        vp_stage = vp if dims.num_chunks > 1 else None
        spec = decoder_block_spec(
            arch,
            config,
            provider,
            pp_rank=dims.pp_rank,
            vp_stage=vp_stage,
            gdn_backend=options.gdn_backend,
            gdn_chunk_size=options.gdn_chunk_size,
        )
        model = StudentModel(
            config=config,
            transformer_layer_spec=spec,
            vocab_size=padded,
            max_sequence_length=arch.max_position_embeddings,
            pre_process=dims.pp_rank == 0 and vp == 0,
            post_process=dims.pp_rank == dims.pp_size - 1 and vp == dims.num_chunks - 1,
            parallel_output=True,
            share_embeddings_and_output_weights=arch.tie_embeddings,
            position_embedding_type="rope",
            rotary_percent=arch.rotary_fraction,
            rotary_base=theta,
            pg_collection=dims.pg,
            vp_stage=vp_stage,
            arch=arch,
        )
        chunks.append(model.to(device))
    return chunks
