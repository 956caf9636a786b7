"""What Triton's python backend API offers about a model's configuration: the lookups a model
makes on the `model_config` dict `initialize` gets, and `ModelConfig`, the object
`auto_complete_config` receives and returns."""

from __future__ import annotations

import json
from typing import Any

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of input `name`, or None."""
    return _entry(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of output `name`, or None."""
    return _entry(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config's model_transaction_policy is decoupled."""
    policy = model_config.get("model_transaction_policy")
    return bool(policy.get("decoupled", False)) if isinstance(policy, dict) else False


def _entry(model_config: dict[str, Any], key: str, name: str) -> dict[str, Any] | None:
    for entry in model_config.get(key, []):
        if entry.get("name") == name:
            return entry
    return None


class ModelConfig:
    """The model's configuration as `auto_complete_config` sees it (`as_dict()`), changed only
    through the setters, which refuse what contradicts the config with Triton's messages.

    What the hook asked for is also recorded (`recorded()`); the server applies that to the
    real config, filling only what the config lacks."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("name", "")
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])
        self._model_config: dict[str, Any] = config
        self.max_batch_size: int | None = None
        self.dynamic_batching = False
        self.inputs: list[dict[str, Any]] = []
        self.outputs: list[dict[str, Any]] = []
        self.transaction_policy: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = int(self._model_config.get("max_batch_size") or 0)
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)
        self.max_batch_size = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})
        self.dynamic_batching = True

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, _INPUT_PROPERTIES)
        self.inputs.append(_normalised(input))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, _OUTPUT_PROPERTIES)
        self.outputs.append(_normalised(output))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted
        self.transaction_policy = dict(transaction_policy_dict)

    def recorded(self) -> dict[str, Any]:
        """What the model asked for, as plain data the server can apply."""
        return {
            "max_batch_size": self.max_batch_size,
            "dynamic_batching": self.dynamic_batching,
            "input": self.inputs,
            "output": self.outputs,
            "model_transaction_policy": self.transaction_policy,
        }

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def _add(self, kind: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
        if not isinstance(entry, dict):
            raise ValueError(f"add_{kind} expects a dict, got {type(entry).__name__}")
        label = entry.get("name", "")
        if any(key not in allowed for key in entry):
            quoted = ", ".join(f"'{key}'" for key in allowed[:-1])
            raise ValueError(
                f"{kind} '{label}' in auto-complete-config function for model '{self._name}' "
                f"contains property other than {quoted} and '{allowed[-1]}'."
            )
        if "name" not in entry:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name}' is missing "
                "'name' property."
            )
        for key in ("data_type", "dims"):
            if key not in entry:
                raise ValueError(
                    f"{kind} '{label}' in auto-complete-config function for model "
                    f"'{self._name}' is missing '{key}' property."
                )
        for current in self._model_config[kind]:
            if current.get("name") != label:
                continue
            self._check_same(kind, current, entry)
            current["data_type"] = entry["data_type"]
            current["dims"] = entry["dims"]
            if "optional" in entry:
                current["optional"] = entry["optional"]
            return
        self._model_config[kind].append(entry)

    def _check_same(self, kind: str, current: dict[str, Any], entry: dict[str, Any]) -> None:
        label = entry["name"]
        configured = current.get("data_type", "TYPE_INVALID")
        if configured != "TYPE_INVALID" and configured != entry["data_type"]:
            raise ValueError(
                f"unable to load model '{self._name}', configuration expects datatype "
                f"{configured} for {kind} '{label}', model provides {entry['data_type']}"
            )
        dims = current.get("dims")
        if dims and [int(d) for d in dims] != [int(d) for d in entry["dims"]]:
            raise ValueError(
                f"model '{self._name}', tensor '{label}': the model expects dims "
                f"{entry['dims']} but the model configuration specifies dims {dims}"
            )
        if (
            "optional" in current
            and "optional" in entry
            and current["optional"] != entry["optional"]
        ):
            raise ValueError(
                f"model '{self._name}', tensor '{label}': the model expects optional "
                f"{entry['optional']} but the model configuration specifies optional "
                f"{current['optional']}"
            )


def _normalised(entry: dict[str, Any]) -> dict[str, Any]:
    result = dict(entry)
    result["dims"] = [int(d) for d in entry["dims"]]
    return result
