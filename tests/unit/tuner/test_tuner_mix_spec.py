"""--traffic-mix parsing (NAME=SHARE pairs, shares normalised to 1) and its models checked
against the repository (present, not an ensemble, not stateful)."""

from __future__ import annotations

import pytest

from tests.conftest import BUNDLED_REPOSITORY
from tuner.errors import TuneUsageError
from tuner.mix_spec import TrafficMixError, parse_traffic_mix
from tuner.plan import plan_mix


def test_shares_that_add_up_to_one_are_kept() -> None:
    mix = parse_traffic_mix("digits=0.7, resnet18=0.3")
    assert mix.shares == {"digits": pytest.approx(0.7), "resnet18": pytest.approx(0.3)}
    assert mix.models == ("digits", "resnet18")
    assert not mix.normalised
    assert mix.describe() == "digits 70%, resnet18 30%"


def test_other_shares_are_normalised() -> None:
    mix = parse_traffic_mix("digits=7,simple=3")
    assert mix.normalised and mix.given_total == 10
    assert mix.shares == {"digits": pytest.approx(0.7), "simple": pytest.approx(0.3)}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("digits", "'digits' is not NAME=SHARE"),
        ("digits=0.5,=0.5", "'=0.5' is not NAME=SHARE"),
        ("digits=", "'digits=' is not NAME=SHARE"),
        ("digits=lots,simple=1", "the share 'lots' is not a number"),
        ("digits=0,simple=1", "'digits=0': the share must be a number > 0"),
        ("digits=-1,simple=1", "'digits=-1': the share must be a number > 0"),
        ("digits=nan,simple=1", "'digits=nan': the share must be a number > 0"),
        ("digits=1,,simple=1", "empty entry"),
        ("digits=1,digits=2", "'digits' appears twice"),
        ("digits=1", "at least two models"),
    ],
)
def test_bad_input_names_the_entry(text: str, says: str) -> None:
    with pytest.raises(TrafficMixError, match=says.replace("(", r"\(")):
        parse_traffic_mix(text)


def test_the_mix_is_one_target_of_its_models() -> None:
    target = plan_mix(BUNDLED_REPOSITORY, {"digits": 0.7, "simple": 0.3})
    assert target.kind == "mix"
    assert target.steps == ("digits", "simple")
    assert target.shares == (0.7, 0.3)
    assert target.name == "mix-digits-simple"


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("no_such_model", "no model 'no_such_model'"),
        ("digits_pipeline", "'digits_pipeline' is an ensemble"),
        ("stateful_sum", "'stateful_sum' cannot be tuned: a stateful model"),
    ],
)
def test_a_model_that_cannot_join_a_mix_is_named(model: str, says: str) -> None:
    with pytest.raises(TuneUsageError, match=says):
        plan_mix(BUNDLED_REPOSITORY, {"digits": 0.5, model: 0.5})
