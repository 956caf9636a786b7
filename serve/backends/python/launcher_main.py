"""The stub launcher process: numpy and the stub imported once, then a fork per stub.

Started by the server (`launcher.StubLauncher`) as `python -m serve.backends.python.launcher_main
<control fd>`, on a SOCK_SEQPACKET socket. Each message from the server is a launch: an 8-byte
request id with the new stub's socket attached (SCM_RIGHTS); the launcher forks, the child
runs the stub on that socket, and the launcher answers `FORKED` (id, pid). When a child ends
the launcher reaps it and sends `EXITED` (pid, exit code as subprocess reports it: negative
for a signal). It exits when the server closes the control socket (or dies).

Single-threaded on purpose (a fork copies only the calling thread): SIGCHLD reaches the loop
through signal.set_wakeup_fd.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import struct
import sys
import traceback

REQUEST = struct.Struct("!Q")
REPLY = struct.Struct("!cqq")
FORKED, EXITED = b"F", b"E"


def serve_launches(control: socket.socket) -> None:
    """The launcher's loop: fork a stub for each launch on `control`, reap the children and report
    both; returns when the server closes `control`."""
    from serve.backends.python import stub  # the point of this process: imported once

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _flags, _address = socket.recv_fds(control, REQUEST.size, 1)
                if not message:
                    return  # the server is gone
                (request_id,) = REQUEST.unpack(message)
                pid = os.fork()
                if pid == 0:
                    os._exit(_run_stub(stub.main, fds[0], (control, wake_read, wake_write)))
                for fd in fds:
                    os.close(fd)
                control.send(REPLY.pack(FORKED, request_id, pid))
            else:
                while True:
                    try:
                        if not os.read(wake_read, 512):
                            break
                    except BlockingIOError:
                        break
                _reap(control)


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        control.send(REPLY.pack(EXITED, pid, os.waitstatus_to_exitcode(status)))


def _run_stub(main: object, fd: int, launcher_fds: tuple[socket.socket, int, int]) -> int:
    """In the forked child: drop the launcher's state, then be a stub."""
    control, wake_read, wake_write = launcher_fds
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.close()
        os.close(wake_read)
        os.close(wake_write)
        code = main([str(fd)])  # type: ignore[operator]
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return int(code)


def main() -> int:
    """The launcher's entry point (the control socket's fd in argv[1]); returns 0 once the server
    has closed that socket."""
    # Ctrl-C reaches the whole process group; the server ends the launcher itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=int(sys.argv[1]))
    try:
        serve_launches(control)
    finally:
        control.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
