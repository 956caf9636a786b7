"""`pb_utils.Tensor`: a named tensor in host memory (a numpy array) or, made with
`from_dlpack`, on a GPU (the producer's object, kept as it is until the tensor must cross to
the server, where it is copied to the host)."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from common.invariant import present
from serve.backends.python.pb_errors import TritonModelException
from serve.backends.python.pb_types import TRITONSERVER_TYPES, numpy_to_triton_type

# DLPack's DLDeviceType values this API meets.
DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3  # pinned host memory: host-readable
_HOST_DEVICES = (DL_CPU, DL_CUDA_HOST)


class Tensor:
    """`Tensor(name, numpy_array)`; a non-contiguous array is made contiguous, as in Triton."""

    def __init__(self, name: str, array: Any) -> None:
        _check_name(name)
        if array is None:
            raise TritonModelException(f"Tensor '{name}': expected a numpy array, got None")
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        if numpy_to_triton_type(array.dtype) is None:
            raise TritonModelException(
                f"Tensor '{name}': numpy dtype {array.dtype} has no Triton data type"
            )
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = name
        self._array: np.ndarray | None = array
        self._device_object: Any = None  # set instead of _array for a tensor on a GPU
        self._device: tuple[int, int] = (DL_CPU, 0)
        self._gpu_shape: list[int] = []
        self._gpu_dtype = 0

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        if self._array is None:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._array

    def shape(self) -> list[int]:
        if self._array is None:
            return list(self._gpu_shape)
        return [int(d) for d in self._array.shape]

    def triton_dtype(self) -> int:
        if self._array is None:
            return self._gpu_dtype
        return present(
            numpy_to_triton_type(self._array.dtype), "a tensor's dtype is checked at construction"
        )

    def is_cpu(self) -> bool:
        """Whether the data lies in host memory (a GPU tensor from `from_dlpack` does not)."""
        return self._array is not None

    def to_dlpack(self) -> Any:
        """A DLPack capsule of this tensor's data (no copy)."""
        return self.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._array is None:
            return self._device_object.__dlpack__(stream=stream, **kwargs)
        if self._array.dtype == np.object_:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if not self._array.flags.writeable:
            # DLPack cannot say "read-only"; numpy refuses to export such an array.
            self._array = self._array.copy()
        return self._array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A tensor sharing the memory of a DLPack capsule or of any object with `__dlpack__`
        and `__dlpack_device__` (a torch tensor, a cupy or numpy array). Host data becomes a
        numpy view; GPU data stays on its GPU (is_cpu() False)."""
        _check_name(name)
        if _is_capsule(tensor):
            producer: Any = _CapsuleProducer(tensor)
        elif hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__"):
            producer = tensor
        else:
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                "`__dlpack__` and `__dlpack_device__` attributes"
            )
        device_type, device_id = (int(v) for v in producer.__dlpack_device__())
        if device_type == DL_CUDA:
            if isinstance(producer, _CapsuleProducer):
                producer = _gpu_capsule_owner(name, producer)
            return _gpu_tensor(name, producer, device_id)
        if device_type not in _HOST_DEVICES:
            raise TritonModelException(
                f"DLDevice type {device_type} is not support by Python backend."
            )
        try:
            array = np.from_dlpack(producer)
        except (BufferError, TypeError, RuntimeError) as exc:
            raise TritonModelException(f"Tensor '{name}': from_dlpack: {exc}") from None
        if not array.flags.c_contiguous:
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are "
                "stored in C-Order are supported."
            )
        return Tensor(name, array)

    def _host_array(self) -> np.ndarray:
        """The data in host memory: the array itself, or a GPU tensor copied to the host."""
        if self._array is not None:
            return self._array
        return _copy_to_host(self._name, self._device_object)

    def __repr__(self) -> str:
        where = "cpu" if self.is_cpu() else f"gpu:{self._device[1]}"
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self.triton_dtype()}, {where})"


def _check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise TritonModelException(f"Tensor name must be a str, not {type(name).__name__}")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")


def _gpu_tensor(name: str, producer: Any, device_id: int) -> Tensor:
    tensor = Tensor.__new__(Tensor)
    tensor._name = name
    tensor._array = None
    tensor._device_object = producer
    tensor._device = (DL_CUDA, device_id)
    shape, dtype = _gpu_layout(name, producer)
    tensor._gpu_shape = shape
    tensor._gpu_dtype = dtype
    return tensor


def _gpu_capsule_owner(name: str, producer: _CapsuleProducer) -> Any:
    """A GPU capsule taken over by torch, which then tells its shape and dtype."""
    try:
        import torch
    except ImportError:
        raise TritonModelException(
            f"Tensor '{name}': a DLPack capsule on a GPU needs torch to be read"
        ) from None
    return torch.from_dlpack(producer.__dlpack__())


def _gpu_layout(name: str, producer: Any) -> tuple[list[int], int]:
    """Shape and Triton data type of a GPU tensor, read through the library that made it."""
    shape = getattr(producer, "shape", None)
    dtype = getattr(producer, "dtype", None)
    if shape is None or dtype is None:
        raise TritonModelException(
            f"Tensor '{name}': a GPU tensor needs `shape` and `dtype` (a torch tensor or a "
            "cupy array)"
        )
    dtype_name = str(dtype).removeprefix("torch.")
    if dtype_name == "bfloat16":
        return [int(d) for d in shape], TRITONSERVER_TYPES["BF16"]
    number = numpy_to_triton_type(_TORCH_NAMES.get(dtype_name, dtype_name))
    if number is None:
        raise TritonModelException(f"Tensor '{name}': dtype {dtype} has no Triton data type")
    return [int(d) for d in shape], number


_TORCH_NAMES = {"float": "float32", "half": "float16", "double": "float64", "bool": "bool"}


def _copy_to_host(name: str, producer: Any) -> np.ndarray:
    """A GPU tensor's data in a numpy array, through torch or cupy (whichever is installed)."""
    try:
        import torch

        return torch.from_dlpack(producer).cpu().numpy()
    except ImportError:
        pass
    try:
        import cupy

        return cupy.asnumpy(cupy.from_dlpack(producer))
    except ImportError:
        raise TritonModelException(
            f"Tensor '{name}' lies on a GPU: copying it to the host needs torch or cupy"
        ) from None


# -- raw DLPack capsules ---------------------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensorHead(ctypes.Structure):
    # The start of DLManagedTensor (its DLTensor's data pointer and device), all that is read.
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


class _CapsuleProducer:
    """A raw, unconsumed "dltensor" capsule as an object numpy's from_dlpack takes."""

    def __init__(self, capsule: Any) -> None:
        if not _is_valid(capsule, b"dltensor"):
            raise TritonModelException(
                "Provided tensor is not supported: the DLPack capsule was consumed already"
            )
        head = _DLTensorHead.from_address(_get_pointer(capsule, b"dltensor"))
        self._capsule = capsule
        self._device = (int(head.device.device_type), int(head.device.device_id))

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device
