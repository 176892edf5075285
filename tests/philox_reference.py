"""Philox4x32-10 in NumPy (uint32 words, uint64 products), written from the published algorithm
(Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), and the mapping of its
words to kd.random's values, so tests compare the device's bits with an independent reference."""

from __future__ import annotations

import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
LOW = np.uint64(0xFFFFFFFF)

# Random123's tests/kat_vectors, the three "philox4x32 10" lines: counter (4 words), key (2 words),
# expected output (4 words).
KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]  # fmt: skip


def philox4x32_10(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``counter`` (..., 4) and ``key`` (..., 2) uint32 -> the (..., 4) uint32 output block."""
    c = [np.asarray(counter, np.uint32)[..., i].astype(np.uint64) for i in range(4)]
    k0, k1 = (np.asarray(key, np.uint32)[..., i].copy() for i in range(2))
    with np.errstate(over="ignore"):
        for round_ in range(10):
            if round_:
                k0, k1 = k0 + W0, k1 + W1
            p0, p1 = M0 * c[0], M1 * c[2]
            c = [
                (p1 >> np.uint64(32)) ^ c[1] ^ k0.astype(np.uint64),
                p1 & LOW,
                (p0 >> np.uint64(32)) ^ c[3] ^ k1.astype(np.uint64),
                p0 & LOW,
            ]
    return np.stack(c, axis=-1).astype(np.uint32)


def words(seed: int, subsequence: int, groups: int) -> np.ndarray:
    """kd_philox(seed, subsequence, g) for g in range(groups): counter (g lo, g hi, sub lo, sub hi),
    key (seed lo, seed hi); shape (groups, 4)."""
    g = np.arange(groups, dtype=np.uint64)
    counter = np.stack(
        [
            g & LOW,
            g >> np.uint64(32),
            np.full(groups, subsequence & 0xFFFFFFFF, np.uint64),
            np.full(groups, subsequence >> 32, np.uint64),
        ],
        axis=-1,
    ).astype(np.uint32)
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    return philox4x32_10(counter, np.broadcast_to(key, (groups, 2)))


def uniform32(w: np.ndarray) -> np.ndarray:
    return ((w >> np.uint32(8)).astype(np.float64) + 1.0) * 2.0**-24


def uniform64(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    bits = ((hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)) >> np.uint64(11)
    return (bits.astype(np.float64) + 1.0) * 2.0**-53


def uniform(n: int, seed: int, dtype: np.dtype, subsequence: int = 0) -> np.ndarray:
    """The first ``n`` values of kd.random.uniform (low 0, high 1), in float64."""
    if np.dtype(dtype) == np.float64:
        w = words(seed, subsequence, -(-n // 2))
        return np.stack([uniform64(w[:, 0], w[:, 1]), uniform64(w[:, 2], w[:, 3])], axis=-1).reshape(-1)[:n]
    return uniform32(words(seed, subsequence, -(-n // 4))).reshape(-1)[:n]


def normal(n: int, seed: int, dtype: np.dtype) -> np.ndarray:
    """The first ``n`` values of kd.random.normal (Box-Muller), in float64."""
    if np.dtype(dtype) == np.float64:
        w = words(seed, 0, -(-n // 2))
        pairs = [(uniform64(w[:, 0], w[:, 1]), uniform64(w[:, 2], w[:, 3]))]
    else:
        u = uniform32(words(seed, 0, -(-n // 4)))
        pairs = [(u[:, 0], u[:, 1]), (u[:, 2], u[:, 3])]
    out = []
    for a, b in pairs:
        r = np.sqrt(-2.0 * np.log(a))
        out += [r * np.cos(2 * np.pi * b), r * np.sin(2 * np.pi * b)]
    return np.stack(out, axis=-1).reshape(-1)[:n]


def integers(n: int, seed: int, low: int, high: int) -> list[int]:
    """The first ``n`` values of kd.random.integers(low, high), as Python ints."""
    span = high - low
    if span < 2**32:
        w = words(seed, 0, -(-n // 4)).reshape(-1)[:n]
        return [low + ((int(x) * span) >> 32) for x in w]
    w = words(seed, 0, -(-n // 2)).reshape(-1, 2)  # (w.x, w.y), (w.z, w.w): hi and lo words
    values = [(int(hi) << 32) | int(lo) for hi, lo in w]
    return [low + (v if span == 2**64 else (v * span) >> 64) for v in values][:n]
