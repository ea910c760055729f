#!/usr/bin/env python3
"""Runs a command on a pseudo-terminal for the dashboard's terminal tests.

Usage: pty-bridge.py COLS ROWS COMMAND [ARG...]

The tests use it to play the server's side of the terminal protocol where
the server has no terminal route yet: the command (`docker exec -it …` into
the sandbox) gets a real terminal of COLS x ROWS. Input on stdin is framed:
one type byte, a 4-byte big-endian length, the payload; type 0 is bytes for
the terminal, type 1 is a new size as ASCII "COLS ROWS". Everything the
terminal prints goes to stdout as it comes. The exit status is the
command's.
"""

import fcntl
import os
import pty
import select
import struct
import sys
import termios


def set_size(fd, cols, rows):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def main():
    if len(sys.argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    cols, rows = int(sys.argv[1]), int(sys.argv[2])
    command = sys.argv[3:]
    pid, fd = pty.fork()
    if pid == 0:
        set_size(0, cols, rows)
        os.execvp(command[0], command)
    stdin = sys.stdin.fileno()
    stdout = sys.stdout.fileno()
    pending = b""
    stdin_open = True
    while True:
        watched = [fd] + ([stdin] if stdin_open else [])
        readable, _, _ = select.select(watched, [], [])
        if fd in readable:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:
                break
            os.write(stdout, data)
        if stdin_open and stdin in readable:
            chunk = os.read(stdin, 65536)
            if not chunk:
                stdin_open = False
                continue
            pending += chunk
            while len(pending) >= 5:
                kind, length = pending[0], struct.unpack(">I", pending[1:5])[0]
                if len(pending) < 5 + length:
                    break
                payload, pending = pending[5:5 + length], pending[5 + length:]
                if kind == 0:
                    os.write(fd, payload)
                elif kind == 1:
                    c, r = payload.decode().split()
                    set_size(fd, int(c), int(r))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8


if __name__ == "__main__":
    sys.exit(main())
