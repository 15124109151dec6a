"""int8 codes of a mirror's vectors (mirror.py), and their 4-bit residuals.

Each row is scaled by its largest component (cosine is scale-free) and rounded to int8: the code
is what the lists (ivf.py) and an exact search over a filter's rows compare, with SIMD int8 dot
products. Rounding costs a cosine ~2e-3 at most, which on the bench corpus (1M rows whose nearest
neighbours' cosines lie within 1e-3 of each other) left the filtered top 10 at recall 0.97-0.99
against the exact one. The residual (what rounding left, in fifteenths of a step, two a byte:
half the code's size again) brings a row within 1/30 of a step of its scaled vector: the final
candidates are re-ranked by the float query against code plus residual, which gave recall
0.997-1.000 on every filter kind, as float16 vectors do (bench/README.md, "Filtered recall and
ten million episodes").
"""

from __future__ import annotations

import numpy as np


def quantize(vectors: np.ndarray) -> np.ndarray:
    """int8 codes of float vectors, each row scaled by its largest component (cosine is scale-free)."""
    return quantize_fine(vectors)[0]


def quantize_fine(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes of float vectors (``quantize``) and their 4-bit residuals, two a byte: what
    rounding each component to its code left, in fifteenths of a code step (-7 to 7, stored
    plus 8). ``decode`` of both is within 1/30 of a step of the scaled vector, where the code alone
    is within 1/2."""
    v = np.asarray(vectors, dtype=np.float32)
    top = np.abs(v).max(axis=1, keepdims=True)
    top[top == 0] = 1.0
    scaled = v * (127.0 / top)
    codes: np.ndarray = np.rint(scaled).astype(np.int8)
    nibbles = (np.clip(np.rint((scaled - codes) * 15.0), -7, 7) + 8).astype(np.uint8)
    if nibbles.shape[1] % 2:
        nibbles = np.concatenate([nibbles, np.full((len(nibbles), 1), 8, np.uint8)], axis=1)
    fine: np.ndarray = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return codes, fine


def decode(codes: np.ndarray, fine: np.ndarray) -> np.ndarray:
    """The scaled vectors (float32) of int8 codes and their residuals (``quantize_fine``)."""
    nibbles = np.empty((len(fine), fine.shape[1] * 2), np.float32)
    nibbles[:, 0::2] = fine & 15
    nibbles[:, 1::2] = fine >> 4
    out: np.ndarray = codes.astype(np.float32) + (nibbles[:, :codes.shape[1]] - 8.0) / 15.0
    return out
