"""Triton's system shared memory extension: registered regions and tensors read from and
written to them. Protocol-neutral: transports only recognise the parameters."""
