"""Which training setups the memory model takes, refused with the field and the rule where a
framework refuses them or the model does not describe them (``SpecError``): the layout's rules
(``layout.parallel.validate_layout``), then the setup's own (sequence length, recompute policy
and modules, activation convention, losses, optimizer, multi-token prediction, MoE load, CPU
offload, optimizer-in-backward, no-sync accumulation, batch and context-parallel divisibility).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

from estimator.counts.flops import Recompute
from estimator.errors import SpecError
from estimator.finetune import FineTune
from estimator.inputs.model import ModelSpec
from estimator.layout.parallel import Parallelism, validate_layout
from estimator.memory.activations import (
    HF_CONVENTION_FAMILIES,
    HF_STYLE,
    RECOMPUTE_MODULES,
    is_mla,
    is_moe,
)
from estimator.memory.training_tables import OPTIMIZERS

if TYPE_CHECKING:
    from estimator.memory.training import TrainingSetup

__all__ = [
    "MAX_MTP_LAYERS",
    "RECOMPUTE_POLICIES",
    "RECOMPUTE_RULE",
    "check_mtp",
    "check_op_policy",
    "check_recompute_modules",
    "check_seq_len",
    "validate_training",
]


def check_seq_len(model: ModelSpec, seq_len: int, field: str = "seq_len") -> None:
    """A sequence length must be >= 1 and within the model's position embeddings."""
    if seq_len < 1:
        raise SpecError(field, "must be >= 1", seq_len)
    if model.max_seq_len is not None and seq_len > model.max_seq_len:
        raise SpecError(
            field, f"exceeds the model's max_position_embeddings={model.max_seq_len}", seq_len
        )


def _check_moe_load(model: ModelSpec, setup: TrainingSetup) -> None:
    if setup.moe_imbalance < 1 or setup.moe_imbalance > 64:
        raise SpecError("moe_imbalance", "must be between 1 (balanced) and 64", setup.moe_imbalance)
    cap = setup.moe_capacity_factor
    if cap is not None and not 0 < cap <= 64:
        raise SpecError("moe_capacity_factor", "must be > 0 and <= 64", cap)
    if model.moe is None and setup.moe_imbalance != 1:
        raise SpecError("moe_imbalance", "applies to mixture-of-experts models", model.id)
    if model.moe is None and cap is not None:
        raise SpecError("moe_capacity_factor", "applies to mixture-of-experts models", model.id)


RECOMPUTE_POLICIES: tuple[Recompute, ...] = get_args(Recompute)
_QUOTED = [f"'{r}'" for r in RECOMPUTE_POLICIES]
RECOMPUTE_RULE = f"must be {', '.join(_QUOTED[:-1])} or {_QUOTED[-1]}"


def check_op_policy(model: ModelSpec, finetune: FineTune, flash_attention: bool) -> None:
    """The per-op policy (recompute ``op``) is modelled on dense Llama-style layers whose linears
    are plain ``nn.Linear`` calls with flash attention, as TorchTitan runs it: the ``mm`` count
    it alternates on changes with experts' grouped GEMMs, MLA, recurrent mixers and the extra
    GEMMs of LoRA adapters."""
    if model.model_type not in HF_CONVENTION_FAMILIES or model.moe is not None:
        raise SpecError(
            "recompute",
            "the per-op policy ('op', TorchTitan's selective_ac_option='op') is modelled for "
            f"dense {', '.join(HF_CONVENTION_FAMILIES)} models; use 'selective' or 'full'",
            model.model_type,
        )
    if finetune.frozen:
        raise SpecError(
            "recompute",
            "the per-op policy is not modelled with LoRA / QLoRA adapters (their GEMMs shift "
            "which outputs it saves); use 'full'",
            finetune.method,
        )
    if not flash_attention:
        raise SpecError(
            "recompute",
            "the per-op policy saves the flash / memory-efficient attention kernels' outputs: "
            "it needs flash_attention",
            flash_attention,
        )


def _check_optimizer_in_backward(p: Parallelism, setup: TrainingSetup) -> None:
    """torchtune's optimizer_in_bwd steps each parameter from a gradient hook: its recipes
    refuse gradient accumulation with it (each micro-batch's backward would step), and a
    pipeline's stages run several backwards a step; an offloaded optimizer steps on the CPU
    after the backward, and adapters' gradients are small already."""
    rule = ""
    if setup.finetune.frozen:
        rule = "applies to full training (an adapter's gradients are small already)"
    elif setup.offload.optimizer:
        rule = "cannot combine with optimizer offload (the CPU steps after the backward)"
    elif p.pp > 1:
        rule = "needs pp = 1 (a pipeline stage runs several backwards a step)"
    else:
        gbs = setup.global_batch_size
        if gbs is not None and gbs != setup.micro_batch_size * p.dp:
            rule = (
                "needs one micro-batch a step, global_batch_size = micro_batch_size x dp ="
                f" {setup.micro_batch_size * p.dp} (no gradient accumulation)"
            )
    if rule:
        raise SpecError("optimizer_in_backward", rule, True)


def check_recompute_modules(
    model: ModelSpec,
    names: tuple[str, ...],
    recompute: str = "selective",
    convention: str = "megatron",
) -> None:
    """Megatron-Core's selective recompute modules, refused where Megatron-Core refuses them
    (TransformerConfig: an unknown name; ``mla_up_proj`` without multi-latent attention;
    ``moe_act`` without grouped MoE experts) and where they would recompute nothing in this
    model (a name the planner takes for what it says, not silently for nothing), under the
    ``recompute`` policy and activation ``convention`` they come with."""
    rule = ""
    unknown = sorted(set(names) - set(RECOMPUTE_MODULES))
    kinds = model.kinds
    moe = any(is_moe(k) for k in kinds)
    absent = {
        "mla_up_proj": not any(is_mla(k) for k in kinds),
        "moe_act": not moe,
        "moe": not moe,
        "shared_experts": not any(
            m.component == "shared_experts" for k in kinds for m in k.linears
        ),
        "mlp": not any(m.component == "mlp" for k in kinds if not is_moe(k) for m in k.linears),
        "layernorm": not moe and not any(is_mla(k) for k in kinds),
        "core_attn": not any(k.attention is not None for k in kinds),
    }
    missing = [n for n in names if absent.get(n, False)]
    if recompute != "selective":
        rule = "needs recompute 'selective' (Megatron-Core's --recompute-granularity selective)"
    elif convention != "megatron":
        rule = "are Megatron-Core's modules: the 'megatron' activation convention"
    elif unknown:
        rule = f"must be among {', '.join(RECOMPUTE_MODULES)} (not {', '.join(unknown)})"
    elif missing:
        rule = (
            f"{', '.join(missing)}: nothing of that in {model.id} (layernorm recomputes the norms"
            " that are modules of their own, the MoE layers' pre-MLP norm and MLA's input norm;"
            " Transformer Engine fuses the others into the next linear)"
        )
    if rule:
        raise SpecError("recompute_modules", rule, list(names))


MAX_MTP_LAYERS = 8


def check_mtp(setup: TrainingSetup) -> None:
    """Multi-token prediction as Megatron-Core trains it: a whole number of depths, each built
    from the model's own layers, in pre-training or full fine-tuning with its fused loss."""
    n = setup.mtp_layers
    if type(n) is not int or not 0 <= n <= MAX_MTP_LAYERS:
        raise SpecError("mtp_layers", f"must be a whole number from 0 to {MAX_MTP_LAYERS}", n)
    if setup.mtp_repeated and not n:
        raise SpecError(
            "mtp_repeated", "repeats a multi-token-prediction module: set mtp_layers >= 1", True
        )
    if setup.activation_convention in HF_STYLE:
        raise SpecError(
            "mtp_layers",
            "multi-token prediction is trained by Megatron-Core (transformers builds no MTP"
            " module): use activation_convention 'megatron'",
            n,
        )
    if setup.finetune.frozen:
        raise SpecError(
            "mtp_layers",
            "multi-token prediction is trained with the whole model (pre-training or full"
            " fine-tuning), not with a frozen base",
            n,
        )


def validate_training(model: ModelSpec, p: Parallelism, setup: TrainingSetup) -> None:
    validate_layout(model, p, training=True)
    check_seq_len(model, setup.seq_len)
    if setup.micro_batch_size < 1:
        raise SpecError("micro_batch_size", "must be >= 1", setup.micro_batch_size)
    if setup.recompute not in RECOMPUTE_POLICIES:
        raise SpecError("recompute", RECOMPUTE_RULE, setup.recompute)
    convention = setup.activation_convention
    if convention not in ("megatron", *HF_STYLE):
        raise SpecError(
            "activation_convention", "must be 'megatron', 'hf' or 'compiled'", convention
        )
    if convention in HF_STYLE and model.model_type not in HF_CONVENTION_FAMILIES:
        raise SpecError(
            "activation_convention",
            f"the '{convention}' convention is modelled for "
            f"{', '.join(HF_CONVENTION_FAMILIES)}; use 'megatron'",
            model.model_type,
        )
    if setup.recompute == "op":
        check_op_policy(model, setup.finetune, setup.flash_attention)
    if setup.recompute_modules:
        check_recompute_modules(
            model, setup.recompute_modules, setup.recompute, setup.activation_convention
        )
    if convention not in HF_STYLE and (setup.chunked_loss or setup.compiled_loss):
        name = "chunked_loss" if setup.chunked_loss else "compiled_loss"
        raise SpecError(
            name,
            "applies to the eager PyTorch losses of the 'hf' and 'compiled' activation "
            "conventions (Megatron's vocabulary-parallel loss is fused)",
            getattr(setup, name),
        )
    if setup.optimizer not in OPTIMIZERS:
        raise SpecError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}", setup.optimizer)
    if setup.mtp_layers or setup.mtp_repeated:
        check_mtp(setup)
    if setup.moe_imbalance != 1.0 or setup.moe_capacity_factor is not None:
        _check_moe_load(model, setup)
    if setup.offload.params and p.zero_stage != 3:
        raise SpecError(
            "offload_params",
            "parameter offload needs ZeRO-3 / FSDP (layout.zero_stage=3), as DeepSpeed and FSDP"
            " offload only sharded parameters",
            p.zero_stage,
        )
    if setup.offload.activation_layers is not None:
        _check_layer_offload(model, p, setup)
    if setup.optimizer_in_backward:
        _check_optimizer_in_backward(p, setup)
    if setup.no_sync_accumulation and (setup.offload.optimizer or setup.offload.params):
        raise SpecError(
            "no_sync_accumulation",
            "not modelled with CPU offload (FSDP keeps the unsharded gradients on the GPU inside"
            " no_sync and offloads them only after the sync)",
            True,
        )
    gbs = setup.global_batch_size
    if gbs is not None and (gbs < 1 or gbs % (setup.micro_batch_size * p.dp)):
        raise SpecError(
            "global_batch_size",
            f"must be a positive multiple of micro_batch_size"
            f" x dp = {setup.micro_batch_size * p.dp}",
            gbs,
        )
    if p.cp > 1 and setup.seq_len % (2 * p.cp):
        raise SpecError(
            "layout.cp",
            f"2*cp={2 * p.cp} must divide seq_len={setup.seq_len} "
            "(load-balanced context parallelism)",
            p.cp,
        )
    if p.cp > 1 and not setup.flash_attention:
        raise SpecError(
            "layout.cp",
            "context parallelism needs flash attention (ring "
            "attention exchanges K/V blocks, not score matrices)",
            p.cp,
        )


def _check_layer_offload(model: ModelSpec, p: Parallelism, setup: TrainingSetup) -> None:
    """Megatron-Core's layer-wise activation offloading, refused where Megatron-Core refuses
    it (TransformerConfig: fewer layers than the model has, no pipeline parallelism, no
    activation recomputation) and without activation offload."""
    n = setup.offload.activation_layers
    field = "offload_activation_layers"
    if not setup.offload.activations:
        raise SpecError(field, "offloads activations: set offload_activations too", n)
    if n is None or not 1 <= n < model.num_layers:
        raise SpecError(
            field,
            f"must be at least 1 and below the model's {model.num_layers} layers (Megatron-Core"
            " offloads fewer layers than the model has)",
            n,
        )
    if p.pp > 1:
        raise SpecError(
            field,
            "Megatron-Core's layer-wise CPU offloading does not run with pipeline parallelism"
            " (offload every layer's activations instead: leave this unset)",
            p.pp,
        )
    if setup.recompute != "none":
        raise SpecError(
            field,
            "Megatron-Core's layer-wise CPU offloading does not run with activation"
            " recomputation (recompute: none)",
            setup.recompute,
        )
