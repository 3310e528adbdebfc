"""Request length distributions: the prompt and output lengths of a serving workload.

A workload is either fixed lengths (every request ``input_len`` prompt tokens and ``output_len``
output tokens: a distribution of one point) or a dataset preset: the lengths a benchmark
client's sampler draws from a public dataset, as a small discretized distribution of prompt
lengths and one of output lengths, taken independent of each other (no source publishes their
joint distribution; the sampler's ``prompt + output`` cap is the only coupling, and it rarely
binds at these means).

**ShareGPT** (``sharegpt``): ``vllm bench serve --dataset-name sharegpt`` and
``sglang.bench_serving --dataset-name sharegpt`` (its 2024 releases) take the first two turns
of each conversation of ``ShareGPT_V3_unfiltered_cleaned_split.json``: the prompt is the
first, the output length is the token count of the second (the request is sent with
``ignore_eos`` and ``max_tokens`` = that count, so it decodes exactly that many), and they
drop a pair whose prompt or output has fewer than 4 tokens, whose prompt has more than 1,024
or whose prompt + output has more than 2,048 (vLLM ``benchmarks/dataset_utils.py``
``is_valid_sequence`` defaults; the same rule in ``sglang/bench_serving.py``
``sample_sharegpt_requests`` of that period). Published means: 1,000 prompts with the
Llama-3.1 tokenizer drew 229,711 input and 203,068 output tokens (vLLM PR #18566), 229.7 and
203.1 per request; SGLang's v0.3.0-vs-vLLM-0.6.0 README (offline table, 5,000 prompts)
implies 194 output tokens per request (4,281.51 tok/s over 22.03 req/s), within 5 %.

No source publishes the spread, so the shape is the **maximum-entropy distribution given the
mean and the sampler's bounds**: an exponential truncated to ``[4, 1024]`` (prompts) and
``[4, 2044]`` (outputs), its rate solved so its mean is the published one (coefficient of
variation about 0.9). It is discretized into ``BINS`` equal-probability bins, each at its
conditional mean, so the bins' mean is the distribution's mean exactly. The shape is an
assumption; only the means are measured.

**MLPerf Inference tasks** (``mlperf-llama2-70b``, ``mlperf-llama3.1-8b``,
``mlperf-llama3.1-405b``, ``mlperf-mixtral-8x7b``, ``mlperf-deepseek-r1``): LoadGen sends
every sample of the task's preprocessed dataset, already tokenized for the task's model, and
the model decodes to EOS or the task's output cap. Prompt means: the ``tok_input`` lengths of
the official dataset files, as exported per sample by Harshith-umesh/mlperf-dashboard
(``mlperf-data/summaries``; the same export reproduces the READMEs' reference output means of
the 405B and Mixtral tasks to the last digit); bounds: the shortest prompt there and the
task's input cap. Output means: the reference implementation's tokens per sample from the
task README, and for Llama-3.1-8B (whose README counts characters) the mean LoadGen counted
in the compared runs, 129.0 in each: every request decodes the same count, one point. The
shape is the maximum-entropy one above, an assumption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from estimator.errors import SpecError

__all__ = [
    "BINS",
    "LENGTH_PRESETS",
    "MLPERF_PRESETS",
    "LengthDistribution",
    "fixed_lengths",
    "truncated_exponential",
]

BINS = 16  # equal-probability bins of a preset's distribution: quantiles to about 1/32
RATE_SPAN = 60.0  # the rates tried, times the range: means from 1/60 of it off either end


@dataclass(frozen=True)
class LengthDistribution:
    """Prompt and output lengths (tokens) of a request population, each a discrete
    distribution of equally likely values, independent of each other."""

    name: str
    label: str
    input_lens: tuple[float, ...]
    output_lens: tuple[float, ...]
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        checks = (("input_lens", self.input_lens, 1), ("output_lens", self.output_lens, 0))
        for field_name, lens, low in checks:
            if not lens or min(lens) < low:
                raise SpecError(field_name, f"must be a non-empty list of lengths >= {low}", lens)

    @cached_property
    def mean_input(self) -> float:
        return math.fsum(self.input_lens) / len(self.input_lens)

    @cached_property
    def mean_output(self) -> float:
        return math.fsum(self.output_lens) / len(self.output_lens)

    @property
    def input_len(self) -> int:
        """The mean prompt, rounded: what the memory model and a lone request assume."""
        return max(round(self.mean_input), 1)

    @property
    def output_len(self) -> int:
        return round(self.mean_output)

    @cached_property
    def mean_decode_tokens(self) -> float:
        """``E[max(OSL - 1, 1)]``: the tokens a request decodes after its first."""
        return math.fsum(max(o - 1, 1) for o in self.output_lens) / len(self.output_lens)

    @cached_property
    def input_scv(self) -> float:
        """Squared coefficient of variation of the prompt length (0: fixed)."""
        m = self.mean_input
        var = math.fsum((x - m) ** 2 for x in self.input_lens) / len(self.input_lens)
        return var / (m * m)

    @cached_property
    def token_weighted_input(self) -> float:
        """``E[ISL^2] / E[ISL]``: the length of the prompt a prompt token belongs to, on
        average (a chunk's attention cost per token grows with its prompt's length)."""
        return self.mean_input * (1 + self.input_scv)

    @cached_property
    def decode_context(self) -> float:
        """The mean context a decoding sequence reads, over decode steps:
        ``E[ISL] + E[OSL^2] / (2 E[OSL])`` (a request decoding ``OSL`` steps is seen ``OSL``
        times, at ``ISL + OSL / 2`` on average: long answers weigh more)."""
        m = self.mean_output
        if m <= 0:
            return self.mean_input
        second = math.fsum(o * o for o in self.output_lens) / len(self.output_lens)
        return self.mean_input + second / (2 * m)

    def input_quantile(self, p: float) -> float:
        """The ``p`` quantile of the prompt length: linear between the bins' midpoints
        (``(i + 1/2) / n`` of the probability), the ends held flat."""
        xs = sorted(self.input_lens)
        n = len(xs)
        pos = p * n - 0.5
        if pos <= 0:
            return xs[0]
        if pos >= n - 1:
            return xs[-1]
        i = int(pos)
        return xs[i] + (pos - i) * (xs[i + 1] - xs[i])


def fixed_lengths(input_len: int, output_len: int) -> LengthDistribution:
    """Every request ``input_len`` prompt tokens and ``output_len`` output tokens."""
    return LengthDistribution(
        name="fixed",
        label=f"fixed {input_len} / {output_len} tokens",
        input_lens=(float(input_len),),
        output_lens=(float(output_len),),
    )


def _mean_on(rate: float, low: float, high: float) -> float:
    """Mean of an exponential of ``rate`` truncated to ``[low, high]``."""
    if abs(rate) < 1e-12:
        return (low + high) / 2
    span = high - low
    return low + 1 / rate - span / math.expm1(rate * span)


def truncated_exponential(
    mean: float, low: float, high: float, bins: int = BINS
) -> tuple[float, ...]:
    """The conditional means of ``bins`` equal-probability bins of the exponential truncated to
    ``[low, high]`` whose mean is ``mean`` (the maximum-entropy distribution on that range with
    that mean). Their average is ``mean`` exactly, up to rounding."""
    if not low < mean < high:
        raise SpecError("mean", f"must lie strictly between {low} and {high}", mean)
    span = high - low
    # The rate (positive where the mean is below the midpoint), by bisection: the mean falls as
    # the rate grows, from near ``high`` at -RATE_SPAN / span to near ``low`` at +RATE_SPAN / span
    lo, hi = -RATE_SPAN / span, RATE_SPAN / span
    if not _mean_on(hi, low, high) < mean < _mean_on(lo, low, high):
        raise SpecError("mean", f"is too close to {low} or {high} for a length distribution", mean)
    for _ in range(200):
        mid = (lo + hi) / 2
        if _mean_on(mid, low, high) > mean:
            lo = mid
        else:
            hi = mid
    rate = (lo + hi) / 2
    total = -math.expm1(-rate * span)  # P(X - low <= span), untruncated

    def edge(q: float) -> float:  # the q quantile, offset from ``low``
        return -math.log1p(-q * total) / rate

    out = []
    for k in range(bins):
        a, b = edge(k / bins), edge((k + 1) / bins) if k + 1 < bins else span
        ea, eb = math.exp(-rate * a), math.exp(-rate * b)
        out.append(low + (a * ea - b * eb) / (ea - eb) + 1 / rate)
    shift = mean - math.fsum(out) / bins  # rounding only: the bins' mean is the mean
    return tuple(x + shift for x in out)


# vLLM PR #18566 (github.com/vllm-project/vllm/pull/18566): 1,000 ShareGPT prompts, Llama-3.1
# tokenizer, ``vllm bench serve``: "Total input tokens: 229711", "Total generated tokens: 203068".
SHAREGPT_MEAN_INPUT = 229_711 / 1000
SHAREGPT_MEAN_OUTPUT = 203_068 / 1000
SHAREGPT_MIN_TOKENS = 4  # is_valid_sequence(min_len=4)
SHAREGPT_MAX_PROMPT = 1024  # is_valid_sequence(max_prompt_len=1024)
SHAREGPT_MAX_TOTAL = 2048  # is_valid_sequence(max_total_len=2048)

LENGTH_PRESETS: dict[str, LengthDistribution] = {
    "sharegpt": LengthDistribution(
        name="sharegpt",
        label="ShareGPT (vllm bench serve / sglang.bench_serving sampling)",
        input_lens=truncated_exponential(
            SHAREGPT_MEAN_INPUT, SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_PROMPT
        ),
        output_lens=truncated_exponential(
            SHAREGPT_MEAN_OUTPUT, SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_TOTAL - SHAREGPT_MIN_TOKENS
        ),
        sources=(
            "Means: vLLM PR #18566 (github.com/vllm-project/vllm/pull/18566), vllm bench serve"
            " on 1,000 ShareGPT prompts (Aeala/ShareGPT_Vicuna_unfiltered, Llama-3.1"
            " tokenizer): 229,711 input and 203,068 generated tokens",
            "Sampling: vllm/benchmarks/dataset_utils.py is_valid_sequence (min 4 tokens,"
            " prompt <= 1,024, prompt + output <= 2,048); the output length is the dataset"
            " answer's token count",
            "Shape: maximum-entropy (truncated exponential) given the mean and those bounds;"
            " an assumption, no spread is published",
        ),
    ),
}


# MLPerf Inference tasks. Prompt means: sums of the per-sample ``input_length`` column of
# Harshith-umesh/mlperf-dashboard@5a43d2748a0881fc007f6a7e00a60a98175b3a6e
# mlperf-data/summaries/<task>.csv (the official dataset files' token counts, exported by
# mlperf-data/original/generate_dataset_summaries.py) over its rows; minimum and maximum
# likewise. Output means: mlcommons/inference@b66003e10e2db4b8c36a448b0545ec90fcc6e9e9.
_DASHBOARD = "Harshith-umesh/mlperf-dashboard@5a43d27:mlperf-data/summaries"
_INFERENCE = "mlcommons/inference@b66003e"
_SHAPE = (
    "Shape: maximum-entropy (truncated exponential) given each mean and its bounds; an"
    " assumption (the export's per-sample spread is not taken)"
)


@dataclass(frozen=True)
class _Task:
    name: str
    label: str
    prompts: tuple[int, int, int, int, int]  # (tokens, samples, shortest, longest, input cap)
    output: tuple[float, float, float]  # (mean, shortest, output cap); cap 0: one point
    sources: tuple[str, ...]

    def distribution(self) -> LengthDistribution:
        tokens, samples, low, _, cap = self.prompts
        mean, out_low, out_cap = self.output
        outputs = (mean,) if out_cap == 0 else truncated_exponential(mean, out_low, out_cap)
        return LengthDistribution(
            name=self.name,
            label=self.label,
            input_lens=truncated_exponential(tokens / samples, low, cap),
            output_lens=outputs,
            sources=(*self.sources, _SHAPE),
        )


_TASKS = (
    _Task(
        "mlperf-llama2-70b",
        "MLPerf llama2-70b (OpenOrca, 24,576 samples, Llama-2 tokenizer)",
        (5_463_976, 24_576, 48, 1021, 1024),
        (294.45, 1, 1024),
        (
            f"Prompts: {_DASHBOARD}/llama2-70b-99.csv, tok_input_length of"
            " open_orca_gpt4_tokenized_llama.sampled_24576.pkl: 5,463,976 tokens over 24,576"
            " samples (222.3 a prompt), 48 to 1,021; cap 1,024 (processorca.py"
            " --seqlen_limit=1024, language/llama2-70b/README.md:141)",
            f"Outputs: {_INFERENCE}:language/llama2-70b/README.md:266, 'Tokens per sample:"
            " 294.45' (Llama-2-70B-chat reference run); cap 1,024",
        ),
    ),
    _Task(
        "mlperf-llama3.1-8b",
        "MLPerf llama3.1-8b (CNN/DailyMail, 13,368 samples, Llama-3.1 tokenizer)",
        (11_639_915, 13_368, 79, 2540, 2540),
        (129.0, 0, 0),
        (
            f"Prompts: {_DASHBOARD}/llama3-1-8b-datacenter.csv, tok_input of cnn_eval.json:"
            " 11,639,915 tokens over 13,368 samples (870.7 a prompt), 79 to 2,540; cap 2,540"
            " (NVIDIA config max_input_len)",
            "Outputs: derived from LoadGen's token and sample counts of the compared runs"
            " (completed tokens/s over completed samples/s: 129.0 in each of the 10); the"
            f" README's gen_len counts characters ({_INFERENCE}:language/llama3.1-8b/"
            "evaluation.py:127), the reference caps outputs at 128 (SUT_VLLM.py:75)",
        ),
    ),
    _Task(
        "mlperf-llama3.1-405b",
        "MLPerf llama3.1-405b (long-context mix, 8,313 samples, Llama-3.1 tokenizer)",
        (78_380_323, 8_313, 476, 19988, 20000),
        (684.68, 1, 2000),
        (
            f"Prompts: {_DASHBOARD}/llama3-1-405b.csv, tok_input_len of"
            " mlperf_llama3.1_405b_dataset_8313_processed_fp16_eval.pkl: 78,380,323 tokens"
            " over 8,313 samples (9,428.6 a prompt), 476 to 19,988; cap 20,000 (NVIDIA config"
            " max_input_len)",
            f"Outputs: {_INFERENCE}:language/llama3.1-405b/README.md:272, tokens_per_sample"
            " 684.68 (reference run); cap 2,000 (max_seq_len 22,000 - 20,000)",
        ),
    ),
    _Task(
        "mlperf-mixtral-8x7b",
        "MLPerf mixtral-8x7b (OpenOrca / GSM8K / MBXP, 15,000 samples, Mixtral tokenizer)",
        (6_410_905, 15_000, 35, 1948, 2048),
        (144.84, 1, 1024),
        (
            f"Prompts: {_DASHBOARD}/mixtral-8x7b.csv, tok_input_len of"
            " 09292024_mixtral_15k_mintoken2_v1.pkl: 6,410,905 tokens over 15,000 samples"
            " (427.4 a prompt), 35 to 1,948; cap 2,048 (NVIDIA builder --max_input_len)",
            f"Outputs: {_INFERENCE}:language/mixtral-8x7b/README.md:292, tokens_per_sample"
            " 144.84 (reference run); cap 1,024",
        ),
    ),
    _Task(
        "mlperf-deepseek-r1",
        "MLPerf deepseek-r1 (reasoning mix, 4,388 samples, DeepSeek tokenizer)",
        (3_527_036, 4_388, 52, 3140, 3140),
        (3886.2274, 1, 20000),
        (
            f"Prompts: {_DASHBOARD}/deepseek-r1.csv, tok_input_len of"
            " mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl: 3,527,036 tokens over 4,388"
            " samples (803.8 a prompt), 52 to 3,140; cap 3,140 (NVIDIA config max_input_len)",
            f"Outputs: {_INFERENCE}:language/deepseek-r1/README.md:271, mean-output-tok-len"
            " 3,886.2274 (reference run); cap 20,000",
        ),
    ),
)
MLPERF_PRESETS = tuple(t.name for t in _TASKS)
LENGTH_PRESETS.update((t.name, t.distribution()) for t in _TASKS)
