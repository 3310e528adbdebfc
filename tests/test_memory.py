"""Training memory: reproduction of published formulas, sharding rules and invariants."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimator import (
    GIB,
    Parallelism,
    SpecError,
    TrainingSetup,
    accelerator_ids,
    get_accelerator,
    get_model,
    get_precision,
    model_from_config,
    training_memory,
)
from estimator.memory.activation_bytes import (
    ActivationShard,
    embedding_activation_bytes,
    layer_activation_bytes,
)
from estimator.memory.training import training_memory_terms
from estimator.terms import TRAINING_MEMORY

TERMS = tuple(t.key for t in TRAINING_MEMORY)  # the registry's training memory terms
H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")

# GPT-3 175B shapes with dropout, as in Korthikanti et al. 2022, Table 2 setting.
GPT3 = model_from_config(
    {
        "model_type": "gpt2",
        "n_embd": 12288,
        "n_layer": 96,
        "n_head": 96,
        "vocab_size": 51200,
        "n_positions": 2048,
    }
)


def _layer_bytes(
    tp: int, sp: bool, flash: bool, recompute: str, s: int = 2048, b: int = 1
) -> float:
    return float(
        layer_activation_bytes(
            GPT3,
            GPT3.kinds[0],
            BF16,
            ActivationShard(tokens=s * b, keys=s, tp=tp, sp=sp, etp=1, recompute=recompute),
            flash=flash,
        )
    )


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_korthikanti_equations(tp: int) -> None:
    s, b, h, a = 2048, 1, 12288, 96
    # eq. (2): tensor parallel, no sequence parallel: sbh (10 + 24/t + 5as/(ht))
    assert _layer_bytes(tp, False, False, "none") == pytest.approx(
        s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    )
    # eq. (3): with sequence parallel: sbh/t (34 + 5as/h)
    assert _layer_bytes(tp, True, False, "none") == pytest.approx(
        s * b * h / tp * (34 + 5 * a * s / h)
    )
    # selective recompute drops the attention scores: 34 sbh / t
    assert _layer_bytes(tp, True, False, "selective") == pytest.approx(34 * s * b * h / tp)
    # full recompute keeps the layer input: 2 sbh (/t with sequence parallel)
    assert _layer_bytes(tp, True, False, "full") == pytest.approx(2 * s * b * h / tp)


def test_megatron_bytes_per_parameter() -> None:
    # Megatron-LM theoretical_memory_usage: 18 bytes/param (bf16 weight, fp32 grad, fp32 master,
    # two fp32 Adam moments); distributed optimizer: 6 + 12/dp.
    model = get_model("llama-2-7b")
    setup = TrainingSetup(seq_len=4096)
    plain = training_memory(model, H100, Parallelism(dp=8), setup, BF16)
    states = (
        plain.weights_bytes
        + plain.gradients_bytes
        + plain.master_weights_bytes
        + plain.optimizer_states_bytes
    )
    assert states == pytest.approx(18 * plain.params_on_gpu)
    dist = training_memory(model, H100, Parallelism(dp=8, distributed_optimizer=True), setup, BF16)
    states = (
        dist.weights_bytes
        + dist.gradients_bytes
        + dist.master_weights_bytes
        + dist.optimizer_states_bytes
    )
    assert states == pytest.approx((6 + 12 / 8) * dist.params_on_gpu)


def test_tp_shards_llama_exactly() -> None:
    model = get_model("llama-2-7b")
    one = training_memory(model, H100, Parallelism(), TrainingSetup(4096), BF16)
    eight = training_memory(model, H100, Parallelism(tp=8), TrainingSetup(4096), BF16)
    norms = 32 * 2 * 4096 + 4096  # RMSNorm weights stay whole on every TP rank
    vocab = 2 * 32000 * 4096  # embedding + head, padded to 32768 rows for tp=8 (Megatron)
    expected = (one.params_on_gpu - norms - vocab) / 8 + norms + 2 * 32768 * 4096 / 8
    assert eight.params_on_gpu == expected


def test_expert_parallel_shards_experts() -> None:
    model = get_model("mixtral-8x7b")
    setup = TrainingSetup(4096)
    ep1 = training_memory(model, H100, Parallelism(dp=8), setup, BF16)
    ep8 = training_memory(model, H100, Parallelism(dp=8, ep=8, etp=1), setup, BF16)
    experts = 32 * 8 * 3 * 4096 * 14336
    assert ep1.params_on_gpu - ep8.params_on_gpu == experts - experts / 8


def test_pipeline_reports_most_loaded_stage() -> None:
    # GPT-2 has a large tied vocabulary relative to its layers: the last stage, with a copy of
    # the embedding and the fp32 logits, is the heaviest at a long sequence.
    result = training_memory(
        get_model("gpt2"),
        H100,
        Parallelism(pp=4),
        TrainingSetup(seq_len=1024, micro_batch_size=16, global_batch_size=16),
        BF16,
    )
    assert result.stage == 3
    tokens = 16 * 1024  # final-norm input and head input (bf16), fp32 logits of 50304 rows
    assert result.logits_bytes == tokens * (768 * 2 + 768 * 2 + 50304 * 4)
    assert any("stage 3" in n for n in result.notes)


def test_one_f_one_b_in_flight_microbatches() -> None:
    model = get_model("llama-2-7b")
    for pp, gbs, expected in ((4, 64, 4), (4, 2, 2), (8, 64, 8)):
        r = training_memory(
            model,
            H100,
            Parallelism(pp=pp),
            TrainingSetup(4096, micro_batch_size=1, global_batch_size=gbs),
            BF16,
        )
        assert r.in_flight_microbatches == expected


def test_interleaving_penalty_matches_megatron() -> None:
    # Megatron: activations x (1 + (pp - 1) / (pp * vp)) on the first stage.
    model = get_model("llama-2-7b")
    setup = TrainingSetup(4096, global_batch_size=64)
    base = training_memory(model, H100, Parallelism(pp=4), setup, BF16)
    inter = training_memory(model, H100, Parallelism(pp=4, vp=2), setup, BF16)
    assert inter.activations_bytes / base.activations_bytes == pytest.approx(1 + 3 / 8)


def test_llama70b_fits_and_405b_does_not() -> None:
    setup = TrainingSetup(
        seq_len=4096, micro_batch_size=1, global_batch_size=512, recompute="selective"
    )
    layout = Parallelism(tp=8, pp=4, dp=8, sequence_parallel=True, distributed_optimizer=True)
    assert training_memory(get_model("llama-3-70b"), H100, layout, setup, BF16).fits
    big = training_memory(
        get_model("llama-3.1-405b"),
        H100,
        Parallelism(tp=8, pp=2, dp=8, sequence_parallel=True),
        setup,
        BF16,
    )
    assert not big.fits and big.total_bytes > 80 * GIB


def test_fp8_adds_weight_cache_and_shrinks_gemm_inputs() -> None:
    model = get_model("llama-3-8b")
    setup = TrainingSetup(4096)
    bf16 = training_memory(model, H100, Parallelism(), setup, BF16)
    fp8 = training_memory(model, H100, Parallelism(), setup, get_precision("fp8"))
    assert fp8.weight_cache_bytes > 0 and bf16.weight_cache_bytes == 0
    assert fp8.activations_bytes < bf16.activations_bytes


def _quantized(precision: str, accelerator: str) -> Any:
    return training_memory(
        get_model("llama-3-8b"),
        get_accelerator(accelerator),
        Parallelism(dp=8, distributed_optimizer=True),
        TrainingSetup(4096),
        get_precision(precision),
    )


def test_quantized_weights_keep_the_copies_the_backward_reads() -> None:
    """Transformer Engine keeps a quantized weight in each layout the training GEMMs read:
    MXFP8 and NVFP4 a row-wise and a column-wise quantization on every GPU, per-tensor fp8 a
    transposed copy except on the GPUs that run fp8 GEMMs in every layout (compute capability
    10.x: B200 / GB200 / B300 / GB300, not H100 nor the SM 12.x RTX PRO 6000)."""
    assert {a for a in accelerator_ids() if get_accelerator(a).fp8_any_layout} == {
        "b100",
        "b200",
        "gb200",
        "b300",
        "gb300",
    }  # the catalog's fp8_any_layout: compute capability 10.x
    one = _quantized("fp8", "b200").weight_cache_bytes  # the linear weights at one byte each
    assert one > 0
    assert _quantized("fp8", "gb300").weight_cache_bytes == one
    assert _quantized("fp8", "h100-sxm-80gb").weight_cache_bytes == 2 * one
    assert _quantized("fp8", "rtx-pro-6000-bse").weight_cache_bytes == 2 * one
    for gpu in ("b200", "h100-sxm-80gb"):
        mxfp8, nvfp4 = _quantized("mxfp8", gpu), _quantized("nvfp4", gpu)
        assert mxfp8.weight_cache_bytes == pytest.approx(2 * (1 + 1 / 32) * one)
        assert nvfp4.weight_cache_bytes == pytest.approx(2 * (0.5 + 1 / 16) * one)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp8", "nvfp4"])
@pytest.mark.parametrize("gpu", ["b200", "h100-sxm-80gb"])
def test_parameters_kept_quantized_replace_the_bf16_weights_and_their_cache(
    fmt: str, gpu: str
) -> None:
    """Megatron's fp8 parameters (the ``*-params`` presets: --fp8-param-gather,
    fp4_param_gather): the linear weights are stored quantized, with the copies the backward
    reads, and there is no bf16 copy beside a cache; the fp32 main parameters, gradients,
    optimizer states and activations are the cached recipe's."""
    cached, params = _quantized(fmt, gpu), _quantized(f"{fmt}-params", gpu)
    linear = _quantized("fp8", "b200").weight_cache_bytes  # linear parameters, one byte each
    assert params.weight_cache_bytes == 0
    assert params.weights_bytes == pytest.approx(
        cached.weights_bytes - 2 * linear + cached.weight_cache_bytes
    )
    for term in ("gradients_bytes", "master_weights_bytes", "optimizer_states_bytes"):
        assert getattr(params, term) == getattr(cached, term), term
    assert params.activations_bytes == cached.activations_bytes
    assert params.total_bytes < cached.total_bytes


def test_lora_on_a_quantized_base_is_refused() -> None:
    from estimator.finetune import FineTune

    for precision in ("fp8-params", "mxfp8-params", "fp8-serving"):
        with pytest.raises(SpecError) as err:
            training_memory(
                get_model("llama-3-8b"),
                H100,
                Parallelism(),
                TrainingSetup(4096, finetune=FineTune("lora")),
                get_precision(precision),
            )
        assert err.value.field == "precision"
    # a bf16 base quantized for the GEMMs is modelled
    training_memory(
        get_model("llama-3-8b"),
        H100,
        Parallelism(),
        TrainingSetup(4096, finetune=FineTune("lora")),
        get_precision("fp8"),
    )


@pytest.mark.parametrize(
    ("layout", "setup", "field"),
    [
        (Parallelism(tp=3), TrainingSetup(4096), "layout.tp"),
        (Parallelism(pp=5), TrainingSetup(4096), "layout.pp"),
        (Parallelism(ep=2), TrainingSetup(4096), "layout.ep"),
        (Parallelism(tp=0), TrainingSetup(4096), "layout.tp"),
        (Parallelism(zero_stage=4), TrainingSetup(4096), "layout.zero_stage"),
        (Parallelism(), TrainingSetup(9000), "seq_len"),
        (Parallelism(), TrainingSetup(0), "seq_len"),
        (Parallelism(), TrainingSetup(4096, micro_batch_size=0), "micro_batch_size"),
        (Parallelism(dp=4), TrainingSetup(4096, global_batch_size=6), "global_batch_size"),
        (Parallelism(cp=3), TrainingSetup(4096), "layout.cp"),
        (Parallelism(), TrainingSetup(4096, recompute="some"), "recompute"),  # type: ignore[arg-type]
    ],
)
def test_invalid_layouts_name_the_field(
    layout: Parallelism, setup: TrainingSetup, field: str
) -> None:
    with pytest.raises(SpecError) as err:
        training_memory(get_model("llama-3-8b"), H100, layout, setup, BF16)
    assert err.value.field == field
    assert field.split(".")[-1] in str(err.value)


def test_tp_error_message_names_rule() -> None:
    with pytest.raises(SpecError, match=r"tp=3 must divide num_attention_heads=32"):
        training_memory(get_model("llama-3-8b"), H100, Parallelism(tp=3), TrainingSetup(4096), BF16)


# --- invariants ---------------------------------------------------------------------------

LAYOUT_MODELS = ["llama-3-8b", "mixtral-8x7b", "gemma-2-9b", "deepseek-v3", "gpt2"]


def _terms(model_id: str, **kw: Any) -> dict[str, Any]:
    model = get_model(model_id)
    layout: dict[str, Any] = dict(tp=1, pp=1, dp=1, cp=1, ep=1, etp=1, vp=1, zero=0)
    run: dict[str, Any] = dict(stage=0, microbatches=8, recompute="none")
    for key, value in kw.items():
        (layout if key in layout else run)[key] = value
    parallel = Parallelism(
        **{k: v for k, v in layout.items() if k != "zero"},
        sequence_parallel=True,
        zero_stage=layout["zero"],
    )
    setup = TrainingSetup(2048, micro_batch_size=1, recompute=run["recompute"])
    return training_memory_terms(
        model,
        BF16,
        parallel,
        setup,
        stages=(run["stage"],),
        microbatches=run["microbatches"],
    )[0]


@settings(max_examples=60, deadline=None)
@given(
    model_id=st.sampled_from(LAYOUT_MODELS),
    tp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 8]),
    zero=st.integers(0, 3),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
def test_more_tp_or_dp_never_increases_a_term(
    model_id: str, tp: int, dp: int, zero: int, recompute: str
) -> None:
    before = _terms(model_id, tp=tp, dp=dp, zero=zero, recompute=recompute)
    for more in (dict(tp=2 * tp, dp=dp), dict(tp=tp, dp=2 * dp)):
        after = _terms(model_id, zero=zero, recompute=recompute, **more)
        for name in TERMS:
            if name in ("comm_buffers_bytes", "fragmentation_bytes"):
                continue  # a new parallel group adds NCCL buffers; fragmentation follows total
            assert after[name] <= before[name] + 1e-6, (name, more)


@settings(max_examples=40, deadline=None)
@given(
    model_id=st.sampled_from(LAYOUT_MODELS), pp=st.sampled_from([1, 2]), stage_frac=st.floats(0, 1)
)
def test_more_pp_never_increases_a_term(model_id: str, pp: int, stage_frac: float) -> None:
    model = get_model(model_id)
    if model.num_layers % (2 * pp):
        return
    small = max(_terms(model_id, pp=pp, stage=s)["weights_bytes"] for s in range(pp))
    large = max(_terms(model_id, pp=2 * pp, stage=s)["weights_bytes"] for s in range(2 * pp))
    assert large <= small
    for name in TERMS:
        if name in ("comm_buffers_bytes", "fragmentation_bytes", "logits_bytes"):
            continue
        worst_small = max(_terms(model_id, pp=pp, stage=s)[name] for s in range(pp))
        worst_large = max(_terms(model_id, pp=2 * pp, stage=s)[name] for s in range(2 * pp))
        # Under 1F1B the first stage holds pp micro-batches of L/pp layers: the layers'
        # activations stay level as pp grows, but each extra micro-batch in flight adds its token
        # ids (and embedding dropout output) at the embedding (Megatron: "8 s b p"). That is the
        # only growth allowed.
        embed = embedding_activation_bytes(model, BF16, 2048, 1, True)
        allowed = pp * embed if name == "activations_bytes" else 0
        assert worst_large <= worst_small + allowed + 1e-6, name


@settings(max_examples=40, deadline=None)
@given(model_id=st.sampled_from(LAYOUT_MODELS), dp=st.sampled_from([2, 4, 16]))
def test_zero_stages_are_ordered(model_id: str, dp: int) -> None:
    totals = [
        sum(_terms(model_id, dp=dp, zero=z)[n] for n in TERMS if n != "zero3_gather_bytes")
        for z in range(4)
    ]
    assert totals[3] <= totals[2] <= totals[1] <= totals[0]


def test_total_is_the_sum_of_the_named_terms() -> None:
    mem = training_memory(
        get_model("mixtral-8x7b"),
        get_accelerator("h100-sxm-80gb"),
        Parallelism(tp=2, pp=2, dp=4, ep=4, zero_stage=3),
        TrainingSetup(2048, global_batch_size=32, recompute="full"),
        get_precision("fp8"),
    )
    terms = mem.terms()
    assert set(terms) == set(TERMS) and len(TERMS) == 12
    assert mem.total_bytes == pytest.approx(sum(terms.values()), rel=1e-12)
    # no logits on this stage; no dequantization buffer without QLoRA (tests/test_finetune.py)
    assert all(v > 0 for k, v in terms.items() if k not in ("logits_bytes", "dequant_buffer_bytes"))
    assert terms["dequant_buffer_bytes"] == 0
