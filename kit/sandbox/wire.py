"""The wire between host and worker: length-prefixed JSON frames, and bounded output capture.

JSON in both directions on purpose: the host never unpickles anything that came out of a
sandbox, and every frame is size-checked before it is read.
"""

from __future__ import annotations

import json
import os
import struct

HEADER = struct.Struct(">I")
MAX_FRAME = 64 << 20

# --------------------------------------------------------------------------- framing


def read_raw(fd: int) -> bytes | None:
    """One frame's JSON body, undecoded; None at EOF. ValueError over :data:`MAX_FRAME`."""
    head = _read_exact(fd, HEADER.size)
    if head is None:
        return None
    (n,) = HEADER.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes")
    return _read_exact(fd, n)


def read_frame(fd: int) -> dict | None:
    body = read_raw(fd)
    return None if body is None else json.loads(body)


def write_frame(fd: int, obj: dict) -> None:
    body = json.dumps(obj).encode()
    data = HEADER.pack(len(body)) + body
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


# --------------------------------------------------------------------------- output capture


class Capture:
    """Keeps the head and the tail of a stream, never more than ~4x the cap in memory."""

    def __init__(self, cap_chars: int):
        self.cap = max(64, cap_chars)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = 2 * self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 4 * self.cap:
                del self.tail[: len(self.tail) - 2 * self.cap]

    def text(self) -> tuple[str, bool]:
        """The captured text, middle-cut to ``cap`` characters with a visible marker."""
        if not self.tail:
            full = self.head.decode("utf-8", "replace")
            if len(full) <= self.cap:
                return full, False
            head_s, tail_s, omitted = full[: self.cap // 2], full[-(self.cap // 2):], len(full) - self.cap
        else:
            head_s = self.head.decode("utf-8", "replace")[: self.cap // 2]
            tail_s = self.tail.decode("utf-8", "replace")[-(self.cap // 2):]
            omitted = max(0, self.total - len(head_s.encode()) - len(tail_s.encode()))
        return f"{head_s}\n...[output truncated: {omitted} characters omitted]...\n{tail_s}", True


