"""Shared-memory channels between the control node and its real-time process.

The problem: the control loop must never wait on the process that runs ROS (its GIL, its
executor, DDS), yet both must exchange transitions, tick samples, weights, commands and a
heartbeat. These channels live in one shared mapping and never block either side.

* :class:`Ring` - single-producer single-consumer queue of variable-length records in
  fixed slots. A full ring refuses the new record and counts it; it never blocks.
* :class:`Latest` - a latest-value box (double buffer): the writer never waits, the reader
  gets the newest complete value or, while a write is in flight, the one before.
* :class:`Word` - one aligned 64-bit counter with a single writer (the node's heartbeat).

Why the memory ordering is right, on x86-64 and on aarch64
---------------------------------------------------------
Python has no atomics or fences, so no channel relies on the order in which another CPU
sees two stores. Every record is self-validating instead: a slot holds
``seq | length | crc32 | payload``, and the CRC covers the sequence number, the length and
the payload. A reader accepts a slot only if its ``seq`` is the one it expects and the CRC
matches what it copied. On x86-64 (TSO) stores become visible in program order anyway. On
aarch64 (weakly ordered) the reader may see the new ``seq`` before the new payload, or half
of each: the CRC then does not match, the reader counts a torn read, keeps what it had
and looks again later (it never acts on a partial record). A torn record passes a CRC-32
by chance with probability about 2^-32 per torn read (a heuristic: the figure assumes
random data), and torn reads are themselves rare (the reader must catch the writer
mid-record).

The one ordering that matters the other way - a producer must not overwrite a slot the
consumer is still copying - is carried by dependencies that both architectures respect:
the consumer publishes its ``tail`` only after the CRC check of the bytes it copied (a
store control-dependent on those loads; ARMv8 never makes such a store visible before the
loads are satisfied, x86 never reorders loads with later stores), and the producer writes
a slot only after reading a ``tail`` that frees it (again a store control-dependent on a
load). Every multi-byte counter that is read without a CRC (``tail``, :class:`Word`) is
naturally aligned and 8 bytes wide, which both architectures read and write as a single
copy - provided the access is one 8-byte load or store, which is what CPython's ``struct``
does for ``'<Q'`` on a little-endian machine (a native ``memcpy`` of 8 aligned bytes); an
implementation detail we rely on and state here. A producer never trusts a ``tail`` beyond
its own ``head``.

Each channel object is a view: both processes build the same channel over the same bytes
(the same offset in the mapping); each side calls only the methods named for it.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib

_U64 = struct.Struct('<Q')
_SLOT_HEAD = struct.Struct('<QII')  # seq, length, crc32
SLOT_HEADER_BYTES = _SLOT_HEAD.size  # 16
CACHE_LINE = 64


def _align(n: int, to: int = CACHE_LINE) -> int:
    return (n + to - 1) // to * to


def _crc(seq: int, payload: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(_U64.pack(seq) + struct.pack('<I', len(payload))))


class Word:
    """One aligned 64-bit unsigned counter; a single writer, any number of readers.

    :param buf: the shared mapping.
    :param offset: byte offset (a multiple of 8).
    """

    size_bytes = CACHE_LINE

    def __init__(self, buf: memoryview, offset: int) -> None:
        if offset % 8:
            raise ValueError(f'Word offset must be 8-byte aligned, got {offset}')
        self._buf = buf
        self._off = offset

    def write(self, value: int) -> None:
        """Store ``value`` (the single writer)."""
        _U64.pack_into(self._buf, self._off, value)

    def read(self) -> int:
        """The last stored value."""
        return _U64.unpack_from(self._buf, self._off)[0]


class Ring:
    """Single-producer single-consumer ring of records up to ``max_record`` bytes.

    Layout: ``tail`` (u64, written by the consumer only) on a cache line of its own, then
    ``capacity`` slots of ``16 + max_record`` bytes. The producer keeps its ``head`` to
    itself: the ``seq`` in each slot (index + 1, so zeroed memory is never a record) tells
    the consumer what is there.

    :param buf: the shared mapping.
    :param offset: where the ring starts (cache-line aligned).
    :param capacity: number of slots.
    :param max_record: largest record in bytes.
    """

    def __init__(self, buf: memoryview, offset: int, capacity: int, max_record: int) -> None:
        if capacity < 1:
            raise ValueError(f'Ring capacity must be >= 1, got {capacity}')
        if max_record < 1:
            raise ValueError(f'Ring max_record must be >= 1, got {max_record}')
        self._buf = buf
        self._tail_off = offset
        self._slots_off = offset + CACHE_LINE
        self.capacity = capacity
        self.max_record = max_record
        self._slot_bytes = _align(SLOT_HEADER_BYTES + max_record, 8)
        self._head = 0  # producer side
        self._tail = 0  # consumer side
        self.n_pushed = 0
        self.n_full = 0  # refused by the producer: the ring was full
        self.n_popped = 0
        self.n_torn = 0  # reads that caught a record mid-write (retried later)

    @classmethod
    def bytes_needed(cls, capacity: int, max_record: int) -> int:
        """Size of a ring in the mapping."""
        return _align(CACHE_LINE + capacity * _align(SLOT_HEADER_BYTES + max_record, 8))

    def _slot(self, index: int) -> int:
        return self._slots_off + (index % self.capacity) * self._slot_bytes

    # -- producer ---------------------------------------------------------------------------

    def push(self, record: bytes | bytearray | memoryview) -> bool:
        """Append a record (producer); ``False`` and counted if the ring is full. Never blocks."""
        n = len(record)
        if n > self.max_record:
            raise ValueError(f'record of {n} bytes exceeds the ring slot of {self.max_record}')
        tail = _U64.unpack_from(self._buf, self._tail_off)[0]
        head = self._head
        if tail > head or head - tail >= self.capacity:  # (a tail beyond head: never trust it)
            self.n_full += 1
            return False
        off = self._slot(head)
        seq = head + 1
        buf = self._buf
        buf[off + SLOT_HEADER_BYTES : off + SLOT_HEADER_BYTES + n] = record
        # seq last: on x86 the slot is complete when seq appears; elsewhere the CRC decides.
        struct.pack_into('<II', buf, off + 8, n, _crc(seq, record))
        _U64.pack_into(buf, off, seq)
        self._head = head + 1
        self.n_pushed += 1
        return True

    def free_slots(self) -> int:
        """Slots the producer can fill now."""
        return self.capacity - (self._head - _U64.unpack_from(self._buf, self._tail_off)[0])

    # -- consumer ---------------------------------------------------------------------------

    def pop(self) -> bytes | None:
        """The oldest complete record (consumer), or ``None`` if there is none yet."""
        tail = self._tail
        off = self._slot(tail)
        buf = self._buf
        seq, n, crc = _SLOT_HEAD.unpack_from(buf, off)
        if seq != tail + 1:
            return None  # not written yet (or an old lap still visible)
        if n > self.max_record:
            self.n_torn += 1
            return None
        record = bytes(buf[off + SLOT_HEADER_BYTES : off + SLOT_HEADER_BYTES + n])
        if _crc(seq, record) != crc:
            self.n_torn += 1
            return None
        self._tail = tail + 1
        _U64.pack_into(buf, self._tail_off, self._tail)  # after the check: frees the slot
        self.n_popped += 1
        return record

    def pop_all(self, limit: int = 1 << 30) -> list[bytes]:
        """Up to ``limit`` complete records, oldest first (consumer)."""
        out: list[bytes] = []
        while len(out) < limit and (r := self.pop()) is not None:
            out.append(r)
        return out


class Latest:
    """Latest-value box (double buffer): one writer, one reader, neither ever waits.

    The writer alternates between two slots; each write bumps a sequence number. The reader
    copies the slot with the higher sequence number and checks its CRC; if the writer was
    overwriting it (two writes during one read) it falls back to the other slot, and
    otherwise reports nothing new this time.

    :param buf: the shared mapping.
    :param offset: where the box starts (cache-line aligned).
    :param max_value: largest value in bytes.
    """

    def __init__(self, buf: memoryview, offset: int, max_value: int) -> None:
        if max_value < 1:
            raise ValueError(f'Latest max_value must be >= 1, got {max_value}')
        self._buf = buf
        self.max_value = max_value
        self._slot_bytes = _align(SLOT_HEADER_BYTES + max_value)
        self._offs = (offset, offset + self._slot_bytes)
        self._seq = 0  # writer side
        self.seen_seq = 0  # reader side: the newest sequence number returned
        self.n_writes = 0
        self.n_torn = 0

    @classmethod
    def bytes_needed(cls, max_value: int) -> int:
        """Size of a box in the mapping."""
        return 2 * _align(SLOT_HEADER_BYTES + max_value)

    def write(self, value: bytes | bytearray | memoryview) -> int:
        """Publish ``value`` (writer); return its sequence number. Never blocks."""
        n = len(value)
        if n > self.max_value:
            raise ValueError(f'value of {n} bytes exceeds the box of {self.max_value}')
        seq = self._seq + 1
        off = self._offs[seq % 2]
        buf = self._buf
        # Invalidate first: on x86 a reader then sees nothing here until the value is whole;
        # on aarch64 this store may become visible after the payload's, and the CRC catches it.
        _U64.pack_into(buf, off, 0)
        buf[off + SLOT_HEADER_BYTES : off + SLOT_HEADER_BYTES + n] = value
        struct.pack_into('<II', buf, off + 8, n, _crc(seq, value))
        _U64.pack_into(buf, off, seq)
        self._seq = seq
        self.n_writes += 1
        return seq

    def _read_slot(self, off: int) -> tuple[int, bytes] | None:
        buf = self._buf
        seq, n, crc = _SLOT_HEAD.unpack_from(buf, off)
        if seq == 0:
            return None
        if n > self.max_value:
            self.n_torn += 1
            return None
        value = bytes(buf[off + SLOT_HEADER_BYTES : off + SLOT_HEADER_BYTES + n])
        if _crc(seq, value) != crc:
            self.n_torn += 1
            return None
        return seq, value

    def newest_seq(self) -> int:
        """The highest sequence number visible now (cheap: two 8-byte reads, no copy)."""
        return max(_U64.unpack_from(self._buf, off)[0] for off in self._offs)

    def read(self) -> tuple[int, bytes] | None:
        """The newest complete value as ``(seq, bytes)``, or ``None`` if none was written."""
        a, b = (_U64.unpack_from(self._buf, off)[0] for off in self._offs)
        order = self._offs if a >= b else self._offs[::-1]
        for off in order:
            got = self._read_slot(off)
            if got is not None:
                return got
        return None

    def read_if_newer(self) -> tuple[int, bytes] | None:
        """A value newer than the last one this reader returned, or ``None``."""
        if self.newest_seq() <= self.seen_seq:
            return None
        got = self.read()
        if got is None or got[0] <= self.seen_seq:
            return None
        self.seen_seq = got[0]
        return got


class SharedMemory:
    """An anonymous shared mapping (``memfd``) a child process inherits by file descriptor.

    No name in ``/dev/shm`` to leak, no resource-tracker process: the memory is freed when
    the last process holding the descriptor or the mapping lets go of it.

    :param size: bytes (rounded up to whole pages).
    :param fd: an inherited descriptor to map instead of creating one.
    """

    def __init__(self, size: int, fd: int | None = None) -> None:
        size = _align(size, mmap.PAGESIZE)
        if fd is None:
            fd = os.memfd_create('rip_control_rt', os.MFD_CLOEXEC)  # a child gets it via pass_fds
            os.ftruncate(fd, size)
        self.fd = fd
        self.size = size
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.buf = memoryview(self._map)

    def close(self) -> None:
        """Unmap and close the descriptor (every channel view must be dropped first)."""
        self.buf.release()
        try:
            self._map.close()
        except BufferError:
            pass  # a view still exported: the mapping goes with the process
        try:
            os.close(self.fd)
        except OSError:
            pass
