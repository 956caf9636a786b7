"""Model metadata (`GET /v2/models/{m}[/versions/{v}]`) as dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    """One input or output as a model's metadata describes it: wire datatype and shape."""

    name: str
    datatype: str  # KServe v2 wire name
    shape: list[int]  # as the metadata gives it (-1 for variable dims, batch dim included)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """A model's metadata document: what our data plane answers, and what the analyzer reads
    from any server (`from_json`) to learn a model's tensors."""

    name: str
    versions: list[str] = field(default_factory=list)
    platform: str = ""
    inputs: list[TensorMetadata] = field(default_factory=list)
    outputs: list[TensorMetadata] = field(default_factory=list)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ModelMetadata:
        """From the server's JSON; ProtocolError naming what is missing or malformed."""
        name = document.get("name")
        if not isinstance(name, str):
            raise ProtocolError("the server's model metadata has no 'name'")
        return cls(
            name=name,
            versions=[str(v) for v in document.get("versions") or []],
            platform=str(document.get("platform") or ""),
            inputs=_tensors(document, "inputs", name),
            outputs=_tensors(document, "outputs", name),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": list(self.versions),
            "platform": self.platform,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }


def _tensors(document: Mapping[str, Any], key: str, model: str) -> list[TensorMetadata]:
    tensors = []
    for entry in document.get(key) or []:
        try:
            tensors.append(
                TensorMetadata(
                    str(entry["name"]), str(entry["datatype"]), [int(d) for d in entry["shape"]]
                )
            )
        except (KeyError, TypeError, ValueError):
            raise ProtocolError(
                f"the server's metadata of model '{model}' has a malformed {key} entry:"
                f" {entry!r:.200}"
            ) from None
    return tensors
