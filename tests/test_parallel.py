"""Layout rules: the fast acceptance check agrees with the rule list on every catalog model."""

from __future__ import annotations

import itertools

import pytest

from estimator import Parallelism, SpecError, get_model, model_ids
from estimator.layout.parallel import layout_passes, layout_violations, validate_layout

SIZES = dict(
    tp=(1, 2, 3, 4, 8, 16),
    pp=(1, 2, 3, 4, 5),
    vp=(1, 2, 3),
    dp=(1, 3, 4),
    cp=(1, 2),
    ep=(1, 2, 3, 8, 16),
    etp=(1, 2, 4, 6),
)


@pytest.mark.parametrize("model_id", model_ids())
def test_layout_passes_agrees_with_the_rules(model_id: str) -> None:
    model = get_model(model_id)
    disagree, accepted = [], 0
    for values in itertools.product(*SIZES.values()):
        layout = dict(zip(SIZES, values, strict=True))
        rules = layout_violations(model, Parallelism(**layout), training=True)
        broken = any(b for _, b, _, _ in rules)
        passes = layout_passes(model, **layout)
        accepted += passes
        if passes == broken:
            disagree.append(layout)
    assert not disagree, disagree[:5]
    assert accepted > 0  # the grid holds valid layouts of every model, so both sides are tested


def test_a_refused_layout_names_its_first_broken_rule() -> None:
    llama = get_model("llama-3-70b")  # 64 heads, 8 KV heads, 80 layers
    with pytest.raises(SpecError) as err:
        validate_layout(llama, Parallelism(tp=16, pp=3), training=True)
    assert err.value.field == "layout.tp"
    assert "num_key_value_heads=8" in str(err.value)
    with pytest.raises(SpecError) as err:
        validate_layout(llama, Parallelism(tp=8, pp=3), training=True)
    assert err.value.field == "layout.pp"
    with pytest.raises(SpecError) as err:
        validate_layout(llama, Parallelism(tp=8, pp=0), training=True)
    assert (err.value.field, err.value.rule) == ("layout.pp", "must be an integer >= 1")
