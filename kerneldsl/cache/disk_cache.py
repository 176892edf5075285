"""``DiskCache``: sealed payloads under their keys, in a trusted directory or in memory."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..errors import CacheError, UnsafeCacheDirError
from .explain import check_bindings, differences
from .keys import cache_key, canonical
from .location import default_cache_dir, resolve_directory
from .notice import logger, warn
from .seal import PROCESS_SECRET, check_identity, pack, unpack
from .secret import signing_key
from .store import STORE_ERRORS, DiskStore, MemoryStore, Store, discard_database, is_corrupt

DEFAULT_SIZE_LIMIT = 2 * 1024**3
_MAX_SIZE_LIMIT = 2**63 - 1  # SQLite's largest INTEGER: diskcache stores the limit in its table

_T = TypeVar("_T")


@dataclass(frozen=True)
class CacheEntryInfo:
    """One valid entry, for listing; ``stored_at`` (epoch seconds) is for display only."""

    key: str
    material: dict[str, object]
    size: int
    stored_at: float


class DiskCache:
    """Cubins on disk, keyed by ``cache_key(material)``; see the ``kerneldsl.cache`` docstring."""

    directory: Path | None
    in_memory: bool

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        size_limit: int = DEFAULT_SIZE_LIMIT,
    ) -> None:
        """``directory`` is resolved once, here (see ``resolve_directory``); ``size_limit``
        in bytes, clamped to SQLite's largest integer."""
        if isinstance(size_limit, bool) or not isinstance(size_limit, int) or size_limit < 0:
            raise ValueError(f"size_limit must be a non-negative int, got {size_limit!r}")
        self.size_limit = min(size_limit, _MAX_SIZE_LIMIT)
        self._lock = threading.Lock()
        self._corrupt: Path | None = None  # the directory whose database SQLite cannot read
        path = resolve_directory(directory if directory is not None else default_cache_dir())
        self.directory, self.in_memory = path, False
        try:
            self._store: Store = DiskStore(path, self.size_limit)
        except UnsafeCacheDirError:
            raise  # insecure is not broken: never silently work around it
        except STORE_ERRORS as exc:
            self._degrade(exc)

    def get(self, key: str, material: Mapping[str, object]) -> bytes | None:
        """The payload stored for ``key``, or None on a miss or an invalid entry (evicted)."""
        material_json = canonical(dict(material))
        secret = self._sealing_key()
        try:
            blob = self._use(lambda store: store.get(key))
            if blob is None:
                logger.debug("miss %s", key)
                return None
            value = unpack(blob, secret)
            check_identity(value, key, material_json)
        except CacheError as exc:
            self.evict(key, str(exc))
            return None
        logger.debug("hit %s", key)
        return value.payload

    def put(self, key: str, payload: bytes, material: Mapping[str, object]) -> None:
        """Store ``payload`` under ``key``, which must be ``cache_key(material)``."""
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if key != cache_key(material):
            raise ValueError(f"key {key!r} is not cache_key(material)")
        blob = pack(key, payload, material, self._sealing_key())
        self._use(lambda store: store.set(key, blob))
        logger.debug("stored %s (%d bytes)", key, len(payload))

    def entries(self) -> list[CacheEntryInfo]:
        """Every valid entry; invalid ones found on the way are evicted."""
        secret = self._sealing_key()
        found = []
        for key, stored_at, blob in self._use(lambda store: list(store.rows())):
            try:
                if blob is None:
                    raise CacheError("row is not plain bytes")
                if type(stored_at) not in (int, float):  # would break sorting and explain()
                    raise CacheError(f"store time {stored_at!r} is not a number")
                value = unpack(blob, secret)
                if value.key != key or hashlib.sha256(value.material_json).hexdigest() != key:
                    raise CacheError("header does not match the row's key")
                check_bindings(value.material.get("bindings"))
            except CacheError as exc:
                self.evict(key, str(exc))
                continue
            found.append(CacheEntryInfo(key, value.material, len(value.payload), stored_at))
        return found

    def volume(self) -> int:
        """Bytes used on disk (index and values), or in memory after degrading."""
        return self._use(lambda store: store.volume())

    def clear(self) -> int:
        """Remove every entry; returns how many there were. A cache kept in memory because its
        database is corrupt deletes that database (its entries cannot be counted) and goes
        back to disk."""
        with self._lock:
            if self._corrupt is not None:
                self._start_afresh(self._corrupt)
        return self._use(lambda store: store.clear())

    def explain(self, material: Mapping[str, object]) -> str:
        """Why ``material`` hits or misses: the components in which the nearest entry for
        the same kernel differs (fewest differences, then newest)."""
        material = dict(material)
        kernel = material.get("kernel")
        candidates = [e for e in self.entries() if e.material.get("kernel") == kernel]
        if not candidates:
            return f"miss: no entries for kernel {kernel!r}"
        nearest = min(candidates, key=lambda e: (len(differences(e.material, material)), -e.stored_at))
        differing = differences(nearest.material, material)
        if not differing:
            return "hit"
        return f"miss: nearest entry for kernel {kernel!r} differs in: {', '.join(differing)}"

    def close(self) -> None:
        """Release the database connection of this thread (reopened on next use)."""
        self._store.close()

    def __enter__(self) -> DiskCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self.in_memory else str(self.directory)
        return f"DiskCache({where}, size_limit={self.size_limit})"

    def _use(self, operation: Callable[[Store], _T]) -> _T:
        """Run ``operation`` on the store, degrading to memory if the disk breaks under us."""
        store = self._store
        try:
            return operation(store)
        except STORE_ERRORS as exc:
            with self._lock:
                if self._store is store:
                    self._degrade(exc)
            return operation(self._store)

    def _sealing_key(self) -> bytes:
        """This user's secret; without one, the cache degrades to memory, whose values a
        per-process key seals."""
        secret = signing_key()
        if secret is not None:
            return secret
        with self._lock:
            if not self.in_memory:
                self._degrade(CacheError("there is no usable kerneldsl secret to seal its entries with"))
        return PROCESS_SECRET

    def _start_afresh(self, directory: Path) -> None:
        self.directory, self._corrupt = directory, None
        try:
            discard_database(directory)
            fresh = DiskStore(directory, self.size_limit)
        except UnsafeCacheDirError:
            self.directory = None
            raise
        except STORE_ERRORS as exc:
            self._degrade(exc)
            return
        self._store, self.in_memory = fresh, False

    def _degrade(self, reason: BaseException) -> None:
        remedy = ""
        if self.directory is not None and is_corrupt(reason):
            self._corrupt = self.directory
            remedy = "; run `kerneldsl cache clear` to delete its database and start afresh"
        warn(
            f"kerneldsl cache directory {self.directory} is unusable ({reason}); "
            f"compiled kernels are cached in memory for this process only{remedy}"
        )
        broken = getattr(self, "_store", None)
        self._store = MemoryStore(self.size_limit)
        self.directory, self.in_memory = None, True
        if broken is not None:
            try:
                broken.close()
            except STORE_ERRORS:
                pass

    def evict(self, key: str, reason: str) -> None:
        """Remove the entry under ``key``, which its reader found invalid, with one warning."""
        logger.warning("evicted invalid cache entry %s (%s); it will be recompiled", key, reason)
        self._use(lambda store: store.delete(key))
