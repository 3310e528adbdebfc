"""Speculative decoding: what a serving step drafts and verifies, and what the drafter is.

Each engine step a drafter proposes ``k`` tokens per sequence, one per pass (a chain: vLLM's
default, SGLang's ``--speculative-eagle-topk 1``, TensorRT-LLM's linear drafts), and the target
verifies ``k + 1`` tokens per sequence (the last accepted one and the ``k`` drafts) in one
forward. A step emits ``acceptance_length`` tokens per sequence on average: the drafts accepted
plus the token the verification samples itself (vLLM's "mean acceptance length", SGLang's
"accept length"), so between 1 and ``k + 1``. It is an input: it depends on the drafter, the
data and the sampling, and is measured, never derived here.

The drafters (``method``), as the engines build them:

- ``mtp``: the model's own multi-token-prediction modules (DeepSeek-V3 report, arXiv:2412.19437,
  section 2.2): a projection ``eh_proj`` (2h -> h) of the normalized embedding and hidden state,
  one decoder layer shaped as the model's last (Nemotron-H: the layers of its
  ``mtp_hybrid_override_pattern`` or ``mtp_layers_block_type``), and the embedding and output
  head shared with the model. Pass ``i`` runs module ``i mod n`` (vLLM's ``deepseek_mtp.py``:
  ``spec_step_idx % num_mtp_layers``), so ``k`` may exceed the modules. The config says how many
  modules the checkpoint has (``num_nextn_predict_layers``; MiniMax-M2: ``num_mtp_modules``
  with ``use_mtp``); a model whose config declares none is refused.
- ``eagle``: an EAGLE-1/2 head (arXiv:2401.15077): ``fc`` (2h -> h) over the embedding and the
  hidden state each pass, one decoder layer shaped as the target's first, the target's head
  (vLLM's ``llama_eagle.py``).
- ``eagle3``: an EAGLE-3 head (arXiv:2503.01840): ``fc`` (3h -> h) fusing three of the target's
  hidden states once a step, one decoder layer whose QKV projection reads 2h (the embedding and
  the hidden state concatenated), and its own head over a draft vocabulary (vLLM's
  ``llama_eagle3.py``; 32,000 tokens in the heads the paper's authors publish, e.g.
  ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``: ``draft_vocab_size``).
- ``draft``: a smaller model with the same tokenizer, its own weights and KV cache, ``k``
  decode passes of its own.

Every drafter's first pass reads the tokens the last verification scored (``k + 1`` per
sequence, vLLM's ``EagleProposer.propose``), the others one token per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from estimator.errors import SpecError
from estimator.inputs.families.nemotron_h import LEGACY, NAMES, PATTERN
from estimator.inputs.model import ModelSpec

__all__ = [
    "EAGLE3_DRAFT_VOCAB",
    "METHODS",
    "DraftPass",
    "Method",
    "Speculative",
    "draft_pass",
    "mtp_modules",
    "validate_speculative",
]

Method = Literal["mtp", "eagle", "eagle3", "draft"]
METHODS: tuple[str, ...] = get_args(Method)

# The draft vocabulary of the EAGLE-3 heads the paper's authors publish (their config.json's
# draft_vocab_size, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B and EAGLE3-LLaMA3.3-Instruct-70B).
EAGLE3_DRAFT_VOCAB = 32_000


@dataclass(frozen=True, slots=True)
class Speculative:
    """Speculative decoding of a serving replica: ``num_tokens`` (k) drafts per step by
    ``method``, ``acceptance_length`` tokens emitted per step and sequence (1 to k + 1);
    ``draft`` is the draft model of ``method="draft"``. ``k = 0`` drafts nothing: the engine
    runs (and loads) no drafter, and the step is a plain decode step."""

    method: Method
    num_tokens: int
    acceptance_length: float
    draft: ModelSpec | None = None

    @property
    def queries(self) -> int:
        """Tokens per sequence the target verifies each step."""
        return self.num_tokens + 1

    @property
    def drafting(self) -> bool:
        return self.num_tokens > 0


@dataclass(frozen=True, slots=True)
class DraftPass:
    """One pass of an MTP or EAGLE head, in the target's own layer kinds: ``counts`` layers of
    each kind, a projection of ``fuse_in`` features to the hidden size (each pass, or once a
    step for EAGLE-3's fusion), QKV inputs twice the hidden size (EAGLE-3), and a head over
    ``head_vocab`` rows (None: the target's, shared)."""

    counts: tuple[int, ...]
    fuse_in: int
    fuse_every_pass: bool
    wide_qkv: bool
    head_vocab: int | None
    modules: int  # resident copies (MTP modules; 1 for an EAGLE head)


def mtp_modules(model: ModelSpec) -> int:
    """Multi-token-prediction modules the model's config declares (0 if none)."""
    c = model.config
    if "num_nextn_predict_layers" in c:
        n = c.get("num_nextn_predict_layers") or 0
    elif c.get("use_mtp"):
        n = c.get("num_mtp_modules") or 0
    else:
        n = 0
    return n if isinstance(n, int) and n > 0 else 0


def _mtp_counts(model: ModelSpec) -> tuple[int, ...]:
    """Layers of each kind in one MTP module: the pattern's (Nemotron-H), else one layer of the
    model's last kind."""
    c = model.config
    pattern = c.get("mtp_hybrid_override_pattern")
    types = c.get("mtp_layers_block_type")
    if isinstance(pattern, str):
        types = [PATTERN.get(ch, ch) for ch in pattern]
    names = [k.name for k in model.kinds]
    counts = [0] * len(model.kinds)
    if isinstance(types, list) and types:
        for t in types:
            name = NAMES.get(LEGACY.get(str(t), str(t)), str(t))
            if name not in names:
                raise SpecError(
                    "speculative_method",
                    f"the MTP module's {t!r} layer is not one of the model's layer kinds"
                    f" ({', '.join(names)})",
                    "mtp",
                )
            counts[names.index(name)] += 1
    else:
        counts[model.layer_kinds[-1]] = 1
    return tuple(counts)


def draft_pass(model: ModelSpec, spec: Speculative) -> DraftPass | None:
    """What one drafting pass runs in the target's kinds (None for a draft model)."""
    h = model.hidden_size
    first = [0] * len(model.kinds)
    first[model.layer_kinds[0]] = 1
    if spec.method == "mtp":
        return DraftPass(_mtp_counts(model), 2 * h, True, False, None, mtp_modules(model))
    if spec.method == "eagle":
        return DraftPass(tuple(first), 2 * h, True, False, None, 1)
    if spec.method == "eagle3":
        return DraftPass(tuple(first), 3 * h, False, True, EAGLE3_DRAFT_VOCAB, 1)
    return None


def validate_speculative(model: ModelSpec, spec: Speculative, pp: int) -> None:
    """Refuse what the estimate cannot back, naming the request field."""
    k = spec.num_tokens
    if not isinstance(k, int) or k < 0:
        raise SpecError("num_speculative_tokens", "must be a whole number >= 0", k)
    if not 1 <= spec.acceptance_length <= k + 1:
        raise SpecError(
            "acceptance_length",
            f"must be between 1 and num_speculative_tokens + 1 = {k + 1} (the drafts accepted"
            " per step plus the token the verification samples)",
            spec.acceptance_length,
        )
    if spec.method not in METHODS:
        raise SpecError("speculative_method", f"must be one of {', '.join(METHODS)}", spec.method)
    if (spec.method == "draft") != (spec.draft is not None):
        raise SpecError(
            "draft_model",
            "is required by speculative_method=draft and applies to it only",
            None if spec.draft is None else spec.draft.id,
        )
    if pp > 1:
        raise SpecError(
            "layout.pp",
            "speculative decoding is not modelled with pipeline parallelism (vLLM documents"
            " it as incompatible); serve the replica with tensor parallelism",
            pp,
        )
    if spec.method == "mtp" and not mtp_modules(model):
        raise SpecError(
            "speculative_method",
            f"mtp needs a model with multi-token-prediction modules; {model.id or 'this model'}"
            " declares none (num_nextn_predict_layers in its config)",
            "mtp",
        )
    if spec.method == "mtp":
        _mtp_counts(model)
