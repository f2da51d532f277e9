"""An Arduino Mega's STK500v2 bootloader, played behind a pty, for the README's avrdude line.

No board is here, so the test gives the real ``avrdude`` a pseudo-terminal on whose other
side this plays the bootloader the Mega 2560 ships with (the "wiring" programmer's protocol,
Atmel AVR068): sign-on, parameters, signature and fuse reads, load-address, program and read
flash. What avrdude writes is kept in ``flash`` so a test can compare it with the hex file.

Framing: ``1B seq size_hi size_lo 0E body... checksum`` (XOR of every byte before it); the
reply echoes ``seq`` and starts its body with the command and a status (0x00: OK).
"""

from __future__ import annotations

import os
from pathlib import Path
import select
import threading
import tty

MESSAGE_START = 0x1B
TOKEN = 0x0E
STATUS_OK = 0x00
STATUS_FAILED = 0xC0

CMD_SIGN_ON = 0x01
CMD_SET_PARAMETER = 0x02
CMD_GET_PARAMETER = 0x03
CMD_LOAD_ADDRESS = 0x06
CMD_ENTER_PROGMODE_ISP = 0x10
CMD_LEAVE_PROGMODE_ISP = 0x11
CMD_CHIP_ERASE_ISP = 0x12
CMD_PROGRAM_FLASH_ISP = 0x13
CMD_READ_FLASH_ISP = 0x14
CMD_READ_FUSE_ISP = 0x18
CMD_READ_LOCK_ISP = 0x1A
CMD_READ_SIGNATURE_ISP = 0x1B
CMD_READ_OSCCAL_ISP = 0x1C
CMD_SPI_MULTI = 0x1D

ATMEGA2560_SIGNATURE = (0x1E, 0x98, 0x01)
FLASH_SIZE = 256 * 1024
PARAMETERS = {0x90: 0x0F, 0x91: 0x02, 0x92: 0x0A, 0x94: 50, 0x95: 0, 0x98: 1}


class Stk500v2Board:
    """The bootloader side of a pty; ``link`` points at the device avrdude opens."""

    def __init__(self, link: Path) -> None:
        self.link = link
        self.flash = bytearray(b'\xff' * FLASH_SIZE)
        self.commands: list[int] = []
        self._address = 0  # byte address
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        os.symlink(os.ttyname(self._slave), link)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Stk500v2Board:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        os.close(self._master)
        os.close(self._slave)
        self.link.unlink(missing_ok=True)

    def _serve(self) -> None:
        buf = bytearray()
        while not self._stop.is_set():
            readable, _, _ = select.select([self._master], [], [], 0.05)
            if not readable:
                continue
            try:
                buf += os.read(self._master, 4096)
            except OSError:
                continue
            while True:
                start = buf.find(bytes([MESSAGE_START]))
                if start < 0:
                    buf.clear()
                    break
                del buf[:start]
                if len(buf) < 5:
                    break
                size = buf[2] << 8 | buf[3]
                if buf[4] != TOKEN:
                    del buf[:1]
                    continue
                if len(buf) < 6 + size:
                    break
                message = bytes(buf[: 6 + size])
                del buf[: 6 + size]
                checksum = 0
                for byte in message[:-1]:
                    checksum ^= byte
                if checksum != message[-1]:
                    continue
                reply = self._handle(message[5:-1])
                self._send(message[1], reply)

    def _send(self, seq: int, body: bytes) -> None:
        frame = bytes([MESSAGE_START, seq, len(body) >> 8, len(body) & 0xFF, TOKEN]) + body
        checksum = 0
        for byte in frame:
            checksum ^= byte
        os.write(self._master, frame + bytes([checksum]))

    def _handle(self, body: bytes) -> bytes:
        cmd = body[0]
        self.commands.append(cmd)
        ok = bytes([cmd, STATUS_OK])
        if cmd == CMD_SIGN_ON:
            return ok + bytes([8]) + b'AVRISP_2'
        if cmd == CMD_GET_PARAMETER:
            return ok + bytes([PARAMETERS.get(body[1], 0)])
        if cmd in (CMD_SET_PARAMETER, CMD_ENTER_PROGMODE_ISP, CMD_LEAVE_PROGMODE_ISP):
            return ok
        if cmd == CMD_CHIP_ERASE_ISP:
            self.flash[:] = b'\xff' * FLASH_SIZE
            return ok
        if cmd == CMD_LOAD_ADDRESS:
            word = int.from_bytes(body[1:5], 'big') & 0x7FFFFFFF  # bit 31: extended address
            self._address = 2 * word
            return ok
        if cmd == CMD_PROGRAM_FLASH_ISP:
            n = body[1] << 8 | body[2]
            data = body[10 : 10 + n]
            self.flash[self._address : self._address + n] = data
            self._address += n
            return ok
        if cmd == CMD_READ_FLASH_ISP:
            n = body[1] << 8 | body[2]
            data = bytes(self.flash[self._address : self._address + n])
            self._address += n
            return ok + data + bytes([STATUS_OK])
        if cmd == CMD_READ_SIGNATURE_ISP:
            return ok + bytes([ATMEGA2560_SIGNATURE[body[4] % 3], STATUS_OK])
        if cmd in (CMD_READ_FUSE_ISP, CMD_READ_LOCK_ISP, CMD_READ_OSCCAL_ISP):
            return ok + bytes([0xFF, STATUS_OK])
        if cmd == CMD_SPI_MULTI:
            n_rx = body[2]
            return ok + bytes(n_rx) + bytes([STATUS_OK])
        return bytes([cmd, STATUS_FAILED])


def parse_ihex(text: str) -> dict[int, int]:
    """The bytes of an Intel HEX file, by address (data, extended segment and linear records)."""
    out: dict[int, int] = {}
    base = 0
    for line in text.split():
        record = bytes.fromhex(line[1:])
        assert sum(record) & 0xFF == 0, f'bad checksum in {line}'
        n, address, kind, data = record[0], record[1] << 8 | record[2], record[3], record[4:-1]
        assert len(data) == n
        if kind == 0:
            for i, byte in enumerate(data):
                out[base + address + i] = byte
        elif kind == 2:
            base = int.from_bytes(data, 'big') << 4
        elif kind == 4:
            base = int.from_bytes(data, 'big') << 16
        elif kind == 1:
            break
    return out
