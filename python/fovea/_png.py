"""A PNG writer with zlib only (the service's pictures, the client's arrays): no imaging library."""

import struct
import zlib

import numpy as np


def png_bytes(rgb: np.ndarray) -> bytes:
    """[H, W, 3] uint8 as a PNG file's bytes."""
    a = np.ascontiguousarray(rgb, dtype=np.uint8)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"png_bytes takes [H, W, 3] uint8, got shape {a.shape}")
    h, w = a.shape[:2]
    raw = np.concatenate([np.zeros((h, 1), np.uint8), a.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 3)) + chunk(b"IEND", b""))
