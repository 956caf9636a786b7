"""Triton's CUDA shared-memory client flow against a running server, over HTTP or gRPC.

    python scripts/cuda_shm_client.py [-u localhost:8000] [-i http|grpc]

The steps of Triton's simple_http_cudashm_client.py / simple_grpc_cudashm_client.py (the
examples are not in the tritonclient wheel): on GPU 0, with
`tritonclient.utils.cuda_shared_memory`, two input regions and two output regions are made and
registered, `simple` (INT32 [1, 16] add / sub) is asked to read its inputs from the first and
write its outputs into the others, the outputs are read back from GPU memory and checked, and
every region is unregistered and freed. Needs a GPU, cuda-python and the `simple` model; exits
1 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.cuda_shared_memory as cudashm

MODEL = "simple"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-u", "--url", default=None)
    parser.add_argument("-i", "--protocol", choices=("http", "grpc"), default="http")
    args = parser.parse_args()
    module: Any = httpclient if args.protocol == "http" else grpcclient
    url = args.url or ("localhost:8000" if args.protocol == "http" else "localhost:8001")
    client = module.InferenceServerClient(url)
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()

    input0 = np.arange(16, dtype=np.int32).reshape(1, 16)
    input1 = np.ones((1, 16), dtype=np.int32)
    size = input0.nbytes
    handles = {
        name: cudashm.create_shared_memory_region(name, size, 0)
        for name in ("input0_data", "input1_data", "output0_data", "output1_data")
    }
    try:
        cudashm.set_shared_memory_region(handles["input0_data"], [input0])
        cudashm.set_shared_memory_region(handles["input1_data"], [input1])
        for name, handle in handles.items():
            client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, size)
        print("registered:", client.get_cuda_shared_memory_status())

        inputs = [module.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
        inputs[0].set_shared_memory("input0_data", size)
        inputs[1].set_shared_memory("input1_data", size)
        outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in (0, 1)]
        outputs[0].set_shared_memory("output0_data", size)
        outputs[1].set_shared_memory("output1_data", size)
        result = client.infer(MODEL, inputs, outputs=outputs)

        for index, expected in ((0, input0 + input1), (1, input0 - input1)):
            name = f"OUTPUT{index}"
            if result.get_output(name) is None:
                print(f"{name} missing from the response", file=sys.stderr)
                return 1
            got = cudashm.get_contents_as_numpy(handles[f"output{index}_data"], "INT32", [1, 16])
            if not np.array_equal(got, expected):
                print(f"{name} wrong: {got} != {expected}", file=sys.stderr)
                return 1
            print(f"{name} read from GPU memory: {got.tolist()}")
        client.unregister_cuda_shared_memory()
        status = client.get_cuda_shared_memory_status()
        left = status if args.protocol == "http" else list(status.regions)
        if left:
            print(f"regions left after unregister: {left}", file=sys.stderr)
            return 1
    finally:
        for handle in handles.values():
            cudashm.destroy_shared_memory_region(handle)
    print(f"PASS: CUDA shared memory over {args.protocol}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
