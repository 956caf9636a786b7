"""Triton python-backend model: raw digit images -> the normalized tensor `digits` expects.

IMAGE is UINT8 [H, W] per batch row, grayscale with ink high (0 = background, 255 = full ink),
any size from 8x8 up (8x8 like scikit-learn's digits, 28x28 like MNIST). NORMALIZED is FP32
[1, 8, 8] in [0, 1], as `digits` was trained: scikit-learn's 0..16 pixel counts divided by 16.

scikit-learn's digits are 32x32 bitmaps reduced by counting the ink in each 4x4 block, so a
larger image is reduced the same way: each of the 8x8 cells is the mean of the source area it
covers (fractional pixels weighted by their overlap), which keeps the ink's position and
amount. An 8x8 image passes through unchanged apart from the scaling.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

SIDE = 8


def area_weights(size: int) -> np.ndarray:
    """[SIDE, size] matrix whose row i averages the source pixels under output cell i."""
    edges = np.arange(SIDE + 1) * (size / SIDE)
    pixel = np.arange(size)
    overlap = np.clip(
        np.minimum(edges[1:, None], pixel[None, :] + 1) - np.maximum(edges[:-1, None], pixel),
        0.0,
        None,
    )
    return overlap / (size / SIDE)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.weights: dict[int, np.ndarray] = {}

    def _weights(self, size: int) -> np.ndarray:
        if size not in self.weights:
            self.weights[size] = area_weights(size)
        return self.weights[size]

    def execute(self, requests: list) -> list:
        return [self._normalize(request) for request in requests]

    def _normalize(self, request: "pb_utils.InferenceRequest") -> "pb_utils.InferenceResponse":
        images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
        height, width = images.shape[1:]
        if height < SIDE or width < SIDE:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(
                    f"input 'IMAGE': images must be at least {SIDE}x{SIDE}, got {height}x{width}",
                    pb_utils.TritonError.INVALID_ARG,
                )
            )
        pixels = images.astype(np.float32) / np.float32(255.0)
        if (height, width) != (SIDE, SIDE):
            rows, cols = self._weights(height), self._weights(width)
            pixels = np.einsum("ih,bhw,jw->bij", rows, pixels, cols).astype(np.float32)
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("NORMALIZED", pixels[:, None, :, :])]
        )
