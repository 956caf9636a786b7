"""The ensemble graph checks: each rule refuses its mistake, naming the step and the tensor."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.ensemble import check_ensemble_config, check_ensemble_steps
from serve.config.validate import validate_config
from serve.errors import ServeError


def _fail(field: str, message: str) -> ServeError:
    return ServeError.invalid(f"{field}: {message}")


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1{maps} }}'


def _ensemble(
    steps: list[str], extra: str = "", out: str = "OUT", batch: int = 4
) -> mc.ModelConfig:
    return _config(
        f'name: "ens" platform: "ensemble" max_batch_size: {batch}\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        f'output [ {{ name: "{out}" data_type: TYPE_FP32 dims: [ 3 ] }} ]\n'
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n{extra}"
    )


def _model(
    name: str, batch: int = 8, in_type: str = "TYPE_FP32", dims: str = "3"
) -> mc.ModelConfig:
    return _config(
        f'name: "{name}" backend: "python" max_batch_size: {batch}\n'
        f'input [ {{ name: "X" data_type: {in_type} dims: [ {dims} ] }} ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    )


CHAIN = [_step("a", {"X": "IN"}, {"Y": "mid"}), _step("b", {"X": "mid"}, {"Y": "OUT"})]


def _static_error(config: mc.ModelConfig) -> str:
    with pytest.raises(ServeError) as failure:
        check_ensemble_config(config, _fail)
    return failure.value.message


def _step_error(config: mc.ModelConfig, *models: mc.ModelConfig) -> str:
    check_ensemble_config(config, _fail)
    with pytest.raises(ServeError) as failure:
        check_ensemble_steps(config, models, _fail)
    return failure.value.message


def test_a_good_chain_passes_both_stages() -> None:
    config = _ensemble(CHAIN)
    validate_config(config, "ens/config.pbtxt", "ens")
    check_ensemble_steps(config, [_model("a"), _model("b")], _fail)


def test_a_tensor_produced_twice() -> None:
    steps = [_step("a", {"X": "IN"}, {"Y": "OUT"}), _step("b", {"X": "IN"}, {"Y": "OUT"})]
    message = _static_error(_ensemble(steps))
    assert message == (
        "ensemble_scheduling.step[1] (model 'b').output_map['Y']: ensemble tensor 'OUT' is"
        " already produced by ensemble_scheduling.step[0] (model 'a')"
    )


def test_a_cycle() -> None:
    steps = [
        _step("a", {"X": "IN"}, {"Y": "t1"}),
        _step("b", {"X": "t3"}, {"Y": "t2"}),
        _step("c", {"X": "t2"}, {"Y": "t3"}),
        _step("d", {"X": "t1"}, {"Y": "OUT"}),
    ]
    message = _static_error(_ensemble(steps))
    assert message.startswith("ensemble_scheduling.step[1] (model 'b'): is part of a cycle")
    assert "'t3'" in message


def test_an_unused_input_an_unproduced_output_and_an_unconnected_step_input() -> None:
    unused = _ensemble([_step("a", {"X": "mid"}, {"Y": "OUT"})])
    assert "input_map['X']: ensemble tensor 'mid' is neither" in _static_error(unused)
    unproduced = _ensemble(CHAIN, out="OTHER")
    assert _static_error(unproduced) == (
        "output 'OTHER': is not produced by any step of the ensemble"
    )
    config = _ensemble([_step("a", {"X": "IN"}, {"Y": "OUT"})])
    config.input.add(name="SPARE", data_type=mc.TYPE_FP32, dims=[1])
    assert _static_error(config) == "input 'SPARE': is not used by any step of the ensemble"


def test_fields_an_ensemble_may_not_have() -> None:
    grouped = _ensemble(CHAIN, extra="instance_group [ { count: 2 } ]")
    assert _static_error(grouped).startswith("instance_group: is not allowed for an ensemble")
    backend = _ensemble(CHAIN, extra='backend: "python"')
    assert _static_error(backend).startswith("backend: must be empty")
    empty = _config('name: "ens" platform: "ensemble" ensemble_scheduling { }')
    assert _static_error(empty) == "ensemble_scheduling.step: must list at least one step"
    stray = _model("a")
    stray.ensemble_scheduling.step.add(model_name="b")
    assert _static_error(stray).startswith("ensemble_scheduling: is only allowed")


def test_map_keys_must_be_the_step_models_tensors() -> None:
    config = _ensemble([_step("a", {"NOPE": "IN"}, {"Y": "OUT"})])
    assert _step_error(config, _model("a")) == (
        "ensemble_scheduling.step[0] (model 'a').input_map['NOPE']: 'NOPE' is not an input of"
        " model 'a' (inputs: X)"
    )
    config = _ensemble([_step("a", {"X": "IN"}, {"Z": "OUT"})])
    assert "output_map['Z']: 'Z' is not an output of model 'a'" in _step_error(config, _model("a"))


def test_every_required_input_of_a_step_is_mapped() -> None:
    two_inputs = _model("a")
    two_inputs.input.add(name="W", data_type=mc.TYPE_FP32, dims=[3])
    config = _ensemble([_step("a", {"X": "IN"}, {"Y": "OUT"})])
    assert _step_error(config, two_inputs) == (
        "ensemble_scheduling.step[0] (model 'a').input_map: does not map input 'W' of model 'a'"
    )
    two_inputs.input[1].optional = True
    check_ensemble_steps(config, [two_inputs], _fail)


def test_connected_types_and_shapes_agree() -> None:
    assert _step_error(_ensemble(CHAIN), _model("a"), _model("b", in_type="TYPE_INT32")) == (
        "ensemble tensor 'mid': output 'Y' of ensemble_scheduling.step[0] (model 'a') is"
        " TYPE_FP32 but input 'X' of ensemble_scheduling.step[1] (model 'b') expects TYPE_INT32"
    )
    message = _step_error(_ensemble(CHAIN), _model("a"), _model("b", dims="4"))
    assert message.startswith("ensemble tensor 'mid': output 'Y' of")
    assert "has shape [-1, 3] but input 'X' of" in message and "expects [-1, 4]" in message
    # a variable dimension matches any size
    check_ensemble_steps(_ensemble(CHAIN), [_model("a"), _model("b", dims="-1")], _fail)


def test_batch_sizes_and_decoupled_steps() -> None:
    message = _step_error(_ensemble(CHAIN, batch=16), _model("a"), _model("b"))
    assert message == (
        "ensemble_scheduling.step[0] (model 'a'): the ensemble's max_batch_size 16 exceeds the"
        " model's max_batch_size 8"
    )
    decoupled = _model("b")
    decoupled.model_transaction_policy.decoupled = True
    assert "(model 'b'): decoupled models cannot be ensemble steps" in _step_error(
        _ensemble(CHAIN), _model("a"), decoupled
    )
