"""Triton python-backend model: text -> all-MiniLM-L6-v2's token ids and attention mask.

TEXT is BYTES [1] per batch row (UTF-8). The WordPiece tokenizer is the model's own
tokenizer.json (beside this file, copied there by scripts/build_model_repository.py with its
truncation set to sentence-transformers' max_seq_length), run by the `tokenizers` library.

Each request's rows are padded to the shortest length in the config parameter PADDED_LENGTHS
(comma-separated, ascending; the last must hold the truncation length) that holds its longest
text. The dynamic batcher joins only requests with the same non-batch shape, so a few fixed
lengths let the encoder batch requests of similar length, while a short text is not padded to
the longest possible one (encoder time grows with the padded length).
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"


def padded_lengths(raw: str, truncation: int) -> list[int]:
    try:
        lengths = [int(part) for part in raw.split(",")]
    except ValueError:
        raise ValueError(
            f"parameter PADDED_LENGTHS must be comma-separated integers, got {raw!r}"
        ) from None
    if not lengths or lengths != sorted(set(lengths)) or lengths[0] < 2:
        raise ValueError(f"parameter PADDED_LENGTHS must ascend from at least 2, got {raw!r}")
    if lengths[-1] < truncation:
        raise ValueError(
            f"parameter PADDED_LENGTHS: the last length {lengths[-1]} must hold the "
            f"tokenizer's truncation length {truncation}"
        )
    return lengths


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        path = Path(__file__).resolve().parent / TOKENIZER_FILE
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: run scripts/build_model_repository.py to copy it there"
            )
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        truncation = self.tokenizer.truncation
        if truncation is None:
            raise ValueError(f"{path} sets no truncation length")
        parameters = config.get("parameters") or {}
        raw = parameters.get("PADDED_LENGTHS", {}).get("string_value", str(truncation["max_length"]))
        self.lengths = padded_lengths(raw, int(truncation["max_length"]))
        self.pad_id = int(self.tokenizer.token_to_id("[PAD]") or 0)

    def execute(self, requests: list) -> list:
        return [self._tokenize(request) for request in requests]

    def _tokenize(self, request: "pb_utils.InferenceRequest") -> "pb_utils.InferenceResponse":
        rows = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
        try:
            texts = [r.decode("utf-8") if isinstance(r, bytes) else str(r) for r in rows]
        except UnicodeDecodeError as exc:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(
                    f"input 'TEXT' is not valid UTF-8: {exc}", pb_utils.TritonError.INVALID_ARG
                )
            )
        encodings = self.tokenizer.encode_batch(texts)
        longest = max(len(e.ids) for e in encodings)
        length = next(n for n in self.lengths if n >= longest)
        ids = np.full((len(texts), length), self.pad_id, np.int64)
        mask = np.zeros((len(texts), length), np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]
        )
