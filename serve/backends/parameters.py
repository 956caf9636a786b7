"""A model config's `parameters` as the backends read them: one parser, one error kind.

A value that does not parse is the config's fault, so every backend answers it the same way:
ServeError.invalid naming the config file, the parameter and the value. Absent and empty
values read as unset (Triton's configs often carry `string_value: ""`)."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError

TRUE_WORDS = ("true", "on", "1", "yes")
FALSE_WORDS = ("false", "off", "0", "no")


class ConfigParameters:
    """The `parameters` of one config; `source` names it in errors (its config.pbtxt)."""

    def __init__(self, config: mc.ModelConfig, source: str) -> None:
        self._values = {key: value.string_value for key, value in config.parameters.items()}
        self._source = source

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def text(self, key: str) -> str | None:
        """The value, stripped; None when absent or empty."""
        value = self._values.get(key, "").strip()
        return value or None

    def integer(self, key: str, minimum: int | None = None) -> int | None:
        """The value as an integer (None when unset); below `minimum` is an error."""
        value = self.text(key)
        if value is None:
            return None
        try:
            number = int(value)
        except ValueError:
            raise self._error(key, value, "an integer") from None
        if minimum is not None and number < minimum:
            raise self._error(key, value, f"an integer >= {minimum}")
        return number

    def flag(self, key: str) -> bool | None:
        """The value as a boolean (true/on/1/yes, false/off/0/no); None when unset."""
        value = self.text(key)
        if value is None:
            return None
        if value.lower() in TRUE_WORDS:
            return True
        if value.lower() in FALSE_WORDS:
            return False
        raise self._error(key, value, "true or false")

    def _error(self, key: str, value: str, wanted: str) -> ServeError:
        return ServeError.invalid(f"{self._source}: parameters['{key}']: '{value}' is not {wanted}")
