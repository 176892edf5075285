"""Tests of the kernel disk cache: validation, security, permissions, bounds, degrading."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import logging
import os
import sqlite3
import stat
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import diskcache
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kerneldsl as kd
from kerneldsl import cache as cache_module
from kerneldsl import cli
from kerneldsl.cache import (
    CACHE_FORMAT_VERSION,
    DiskCache,
    cache_key,
    default_cache_dir,
    get_default_cache,
    location,
    set_default_cache,
    values,
)
from kerneldsl.cache import secret as cache_secret
from kerneldsl.errors import CacheError, UnsafeCacheDirError

REPO = Path(__file__).resolve().parents[1]
SOURCE = 'extern "C" __global__ void saxpy(float a, const float* x, float* y) {}\n' * 4


def material(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "format": CACHE_FORMAT_VERSION,
        "fingerprint": "f" * 16,
        "kernel": "saxpy",
        "source": SOURCE,
        "abi": ["float", "ptr<const float>", "ptr<float>"],
        "options": ["-O3"],
        "nvrtc": [13, 0],
        "arch": "sm_80",
        "output": "cubin",
    }
    base.update(changes)
    return base


def put(cache: DiskCache, payload: bytes, **changes: object) -> tuple[str, dict[str, object]]:
    mat = material(**changes)
    key = cache_key(mat)
    cache.put(key, payload, mat)
    return key, mat


def cache_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "kerneldsl.cache" and r.levelno == logging.WARNING]


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[DiskCache]:
    with DiskCache(tmp_path / "cache") as opened:
        yield opened


def degraded_cache(tmp_path: Path, size_limit: int = 2 * 1024**3) -> DiskCache:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return DiskCache(blocker / "cache", size_limit)


@pytest.fixture(params=["disk", "memory"])
def any_cache(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DiskCache]:
    opened = DiskCache(tmp_path / "cache") if request.param == "disk" else degraded_cache(tmp_path)
    assert opened.in_memory == (request.param == "memory")
    with opened:
        yield opened


# --- keys --------------------------------------------------------------------------------


def test_cache_key_is_sha256_of_canonical_json() -> None:
    expected = hashlib.sha256(b'{"a":1,"b":[1,"\\u00e9"]}').hexdigest()
    assert cache_key({"b": [1, "é"], "a": 1}) == expected


@given(st.dictionaries(st.text(), st.one_of(st.integers(), st.text(), st.none())))
def test_cache_key_is_independent_of_dict_order(mat: dict[str, object]) -> None:
    assert cache_key(dict(reversed(list(mat.items())))) == cache_key(mat)


def test_cache_key_is_stable_across_processes() -> None:
    mat = material(options=["-O3", "--use_fast_math"], extra={"z": 1, "a": [2.5, None]})
    code = "import json,sys; from kerneldsl.cache import cache_key; print(cache_key(json.load(sys.stdin)))"
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(dict(reversed(list(mat.items())))),
        capture_output=True, text=True, env=env, cwd=REPO, check=True, timeout=60,
    )  # fmt: skip
    assert child.stdout.strip() == cache_key(mat)


def test_default_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELDSL_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "kerneldsl"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "kerneldsl"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "kerneldsl"
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"


# --- round trip and validation -------------------------------------------------------------


def test_roundtrip_and_miss(any_cache: DiskCache) -> None:
    key, mat = put(any_cache, b"\x7fELF cubin")
    assert any_cache.get(key, mat) == b"\x7fELF cubin"
    other = material(arch="sm_90")
    assert any_cache.get(cache_key(other), other) is None


def test_entries_survive_reopening(tmp_path: Path) -> None:
    with DiskCache(tmp_path / "cache") as first:
        key, mat = put(first, b"payload" * 10_000)
    with DiskCache(tmp_path / "cache") as second:
        assert second.get(key, mat) == b"payload" * 10_000


def test_put_rejects_foreign_key_and_non_bytes(cache: DiskCache) -> None:
    mat = material()
    with pytest.raises(ValueError, match="cache_key"):
        cache.put("0" * 64, b"x", mat)
    with pytest.raises(TypeError, match="bytes"):
        cache.put(cache_key(mat), bytearray(b"x"), mat)  # type: ignore[arg-type]
    assert cache.entries() == []


def _version(blob: bytes, version: int) -> bytes:
    return blob[:9] + struct.pack(">H", version) + blob[11:]


CORRUPTIONS = {
    "empty": lambda blob: b"",
    "truncated-prefix": lambda blob: blob[:5],
    "truncated-header": lambda blob: blob[:40],
    "truncated-payload": lambda blob: blob[:-1],
    "extra-byte": lambda blob: blob + b"\0",
    "bad-magic": lambda blob: b"X" + blob[1:],
    "bad-version": lambda blob: _version(blob, CACHE_FORMAT_VERSION + 1),
    "header-garbage": lambda blob: blob[:20] + b"\xff" + blob[21:],
    "flipped-payload-byte": lambda blob: blob[:-1] + bytes([blob[-1] ^ 0xFF]),
    "garbage": lambda blob: b"garbage!" * 50,
}


@pytest.mark.parametrize("size", [100, 64 * 1024], ids=["inline", "file"])
@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_corrupt_entry_is_evicted_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, corruption: str, size: int
) -> None:
    path = tmp_path / "cache"
    with DiskCache(path) as cache:
        key, mat = put(cache, bytes(range(256)) * (size // 256))
        with diskcache.Cache(str(path)) as raw:
            raw.set(key, CORRUPTIONS[corruption](raw.get(key)))
        caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
        assert cache.get(key, mat) is None
        assert len(cache_warnings(caplog)) == 1
        with diskcache.Cache(str(path)) as raw:
            assert key not in raw
        cache.put(key, b"recompiled", mat)
        assert cache.get(key, mat) == b"recompiled"


def test_corrupt_value_file_is_evicted(cache: DiskCache, caplog: pytest.LogCaptureFixture) -> None:
    key, mat = put(cache, b"\xab" * 100_000)
    assert cache.directory is not None
    (value_file,) = cache.directory.rglob("*.val")
    data = bytearray(value_file.read_bytes())
    data[-10] ^= 1
    value_file.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    assert cache.get(key, mat) is None
    assert len(cache_warnings(caplog)) == 1
    assert cache.entries() == []
    assert not value_file.exists()


def test_entry_under_another_key_is_evicted(cache: DiskCache, caplog: pytest.LogCaptureFixture) -> None:
    key_a, mat_a = put(cache, b"a")
    key_b, _ = put(cache, b"b", arch="sm_90")
    with diskcache.Cache(str(cache.directory)) as raw:
        raw.set(key_a, raw.get(key_b))
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    assert cache.get(key_a, mat_a) is None
    assert len(cache_warnings(caplog)) == 1
    assert [entry.key for entry in cache.entries()] == [key_b]


def test_material_mismatch_is_evicted(any_cache: DiskCache, caplog: pytest.LogCaptureFixture) -> None:
    key, _ = put(any_cache, b"cubin")
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    assert any_cache.get(key, material(options=["-O0"])) is None
    assert len(cache_warnings(caplog)) == 1
    assert any_cache.entries() == []


def forge(key: str, mat: dict[str, object], payload: bytes, /, secret: bytes | None = None, **header: object) -> bytes:
    """A value laid out as the cache writes it, with header fields overridden, sealed with
    ``secret`` (this user's by default)."""
    fields = {"key": key, "material": mat, "payload_size": len(payload), **header}
    text = json.dumps({k: v for k, v in fields.items() if v is not None}, sort_keys=True)
    encoded = text.encode()
    body = b"KDSLCACHE" + struct.pack(">HI", CACHE_FORMAT_VERSION, len(encoded)) + encoded + payload
    key_bytes = secret if secret is not None else cache_module.signing_key()
    assert key_bytes is not None
    return body + hmac.digest(key_bytes, body, "sha256")


FORGERIES = {
    "valid": {},
    "other-key": {"key": "0" * 64},
    "other-material": {"material": material(arch="sm_90")},
    "wrong-size": {"payload_size": 6},
    "another-secret": {"secret": b"s" * 32},
    "missing-field": {"payload_size": None},
    "extra-field": {"comment": "hi"},
    "material-not-a-dict": {"material": ["saxpy"]},
}


@pytest.mark.parametrize("forgery", FORGERIES)
def test_forged_header_is_rejected(tmp_path: Path, forgery: str) -> None:
    path = tmp_path / "cache"
    with DiskCache(path) as cache:
        mat = material()
        key = cache_key(mat)
        forged = forge(key, mat, b"cubin", **FORGERIES[forgery])
        with diskcache.Cache(str(path)) as raw:
            raw.set(key, forged)
            assert [e.key for e in cache.entries()] == ([key] if forgery == "valid" else [])
            raw.set(key, forged)
            assert cache.get(key, mat) == (b"cubin" if forgery == "valid" else None)


@pytest.mark.parametrize("size", [1.0, True], ids=["float", "bool"])
def test_header_field_of_wrong_type_is_evicted(tmp_path: Path, caplog: pytest.LogCaptureFixture, size: object) -> None:
    path = tmp_path / "cache"
    mat = material()
    key = cache_key(mat)
    with DiskCache(path) as cache:
        with diskcache.Cache(str(path)) as raw:
            raw.set(key, forge(key, mat, b"c", payload_size=size))  # 1.0 == True == len(b"c")
        caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
        assert cache.get(key, mat) is None
        assert len(cache_warnings(caplog)) == 1
        with diskcache.Cache(str(path)) as raw:
            assert key not in raw


def test_entry_with_non_numeric_store_time_is_evicted(cache: DiskCache, caplog: pytest.LogCaptureFixture) -> None:
    key, mat = put(cache, b"cubin")
    con = sqlite3.connect(str(Path(str(cache.directory)) / "cache.db"))
    with con:
        con.execute("UPDATE Cache SET store_time = 'yesterday' WHERE key = ?", (key,))
    con.close()
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    assert cache.explain(mat) == "miss: no entries for kernel 'saxpy'"  # was a TypeError
    assert len(cache_warnings(caplog)) == 1
    assert cache.entries() == []


@pytest.mark.parametrize("value", [42, "text", 2.5], ids=["int", "str", "float"])
def test_non_bytes_row_is_evicted(tmp_path: Path, value: object) -> None:
    path = tmp_path / "cache"
    with DiskCache(path) as cache:
        mat = material()
        key = cache_key(mat)
        with diskcache.Cache(str(path)) as raw:
            raw.set(key, value)
        assert cache.get(key, mat) is None
        with diskcache.Cache(str(path)) as raw:
            assert key not in raw


# --- security ----------------------------------------------------------------------------


class Exploit:
    """Unpickling this runs a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


@pytest.mark.parametrize("padding", [0, 40_000], ids=["inline", "file"])
def test_pickle_row_is_never_unpickled(tmp_path: Path, padding: int) -> None:
    path, marker = tmp_path / "cache", tmp_path / "pwned"
    exploit = Exploit(f"touch {marker} #{'x' * padding}")
    mat = material()
    key = cache_key(mat)
    with DiskCache(path) as cache:
        with diskcache.Cache(str(path)) as raw:
            raw.set(key, exploit)
        assert cache.get(key, mat) is None
        assert not marker.exists()
        assert cache.entries() == []
        with diskcache.Cache(str(path)) as raw:
            assert key not in raw
            raw.set(key, exploit)
            raw.get(key)  # control: plain diskcache does run it
        assert marker.exists()


def test_pickled_key_is_never_unpickled(cache: DiskCache, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    key, mat = put(cache, b"cubin")
    with diskcache.Cache(str(cache.directory)) as raw:
        raw.set(Exploit(f"touch {marker}"), b"value")
    assert [entry.key for entry in cache.entries()] == [key]
    assert cache.explain(mat) == "hit"
    assert cache.get(key, mat) == b"cubin"
    assert cache.clear() == 2
    assert not marker.exists()


def test_tampered_file_name_is_neither_read_nor_deleted(
    cache: DiskCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    key, mat = put(cache, b"\x01" * 100_000)
    con = sqlite3.connect(str(Path(str(cache.directory)) / "cache.db"))
    with con:
        con.execute("UPDATE Cache SET filename = ? WHERE key = ?", (str(victim), key))
    con.close()
    opened: list[str] = []

    def spy(file: str, *args: object, **kwargs: object) -> object:
        opened.append(str(file))
        return open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(diskcache.core, "open", spy, raising=False)
    assert cache.get(key, mat) is None
    assert str(victim) not in opened
    assert victim.read_bytes() == b"precious"
    assert cache.entries() == []


def test_disk_layer_refuses_pickled_keys_when_iterating(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with diskcache.Cache(str(tmp_path / "cache")) as raw:
        raw.set(Exploit(f"touch {marker}"), b"value")
    with diskcache.Cache(str(tmp_path / "cache"), disk=values.BytesOnlyDisk) as guarded:
        with pytest.raises(CacheError, match="not plain text"):
            list(guarded)
    assert not marker.exists()


# Rows a tamperer adds to diskcache's Settings table: diskcache would apply each as an attribute of
# the cache or of its Disk (a method, the location, the size a value moves to a file at).
PLANTED_SETTINGS = {"_sql": "planted", "_directory": "/", "disk_fetch": "planted", "disk_min_file_size": "planted"}


def plant_settings(directory: Path, rows: dict[str, object]) -> None:
    with contextlib.closing(sqlite3.connect(directory / "cache.db")) as con, con:
        con.executemany("INSERT OR REPLACE INTO Settings VALUES (?, ?)", rows.items())


def settings_rows(directory: Path) -> dict[str, object]:
    with contextlib.closing(sqlite3.connect(directory / "cache.db")) as con:
        return dict(con.execute("SELECT key, value FROM Settings").fetchall())


def planted_rows_left(directory: Path) -> dict[str, object]:
    """The planted rows still in the table with the planted value (a setting of diskcache's own
    name, such as ``disk_min_file_size``, is written back with kerneldsl's value)."""
    rows = settings_rows(directory)
    return {name: value for name, value in PLANTED_SETTINGS.items() if rows.get(name, None) == value}


@pytest.mark.parametrize("name", sorted(PLANTED_SETTINGS))
def test_a_settings_row_in_the_database_is_never_applied_and_does_not_survive_opening(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / "cache"
    DiskCache(path).close()
    plant_settings(path, {name: PLANTED_SETTINGS[name]})
    with DiskCache(path) as cache:
        assert not cache.in_memory
        assert planted_rows_left(path) == {}
        small, large = put(cache, b"s", kernel="small"), put(cache, b"\xab" * 100_000, kernel="large")
        assert (cache.get(*small), cache.get(*large)) == (b"s", b"\xab" * 100_000)
        assert cache.clear() == 2


def test_the_counters_in_the_settings_table_are_recomputed_from_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "cache"
    with DiskCache(path) as cache:
        put(cache, b"\xab" * 100_000)
        volume = cache.volume()
    plant_settings(path, {"size": 10**15, "count": -3})
    with DiskCache(path) as cache:
        assert cache.volume() == volume
        assert len(cache.entries()) == 1
    assert settings_rows(path)["count"] == 1


def test_a_build_and_cache_clear_work_over_planted_settings_rows(isolated_cache: Path) -> None:
    DiskCache(isolated_cache).close()
    plant_settings(isolated_cache, PLANTED_SETTINGS)

    @kd.kernel(grid=1, block=1)
    def planted(y: kd.Out[kd.float32, 1]) -> str:
        return "y[0] = 1.0f;"

    assert planted.inspect(np.zeros(1, np.float32), arch="sm_90").origin == "nvrtc"
    assert not get_default_cache().in_memory
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert cli.main(["cache", "clear"]) == 0
    assert printed.getvalue().startswith("removed 2 entries")  # the image and its rendered text
    assert planted_rows_left(isolated_cache) == {}


# --- the path ----------------------------------------------------------------------------


def plant_cache(directory: Path, payload: bytes) -> tuple[str, dict[str, object]]:
    """An attacker's world-writable cache holding a self-valid entry for the victim's key."""
    directory.mkdir(parents=True)
    directory.chmod(0o777)
    mat = material()
    key = cache_key(mat)
    with diskcache.Cache(str(directory)) as raw:
        raw.set(key, forge(key, mat, payload))
    return key, mat


@pytest.mark.parametrize("spelling", ["$KD_ATTACKER", "${KD_ATTACKER}"])
def test_dollar_in_cache_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str) -> None:
    plant_cache(tmp_path / "attacker", b"evil cubin")
    monkeypatch.setenv("KD_ATTACKER", str(tmp_path / "attacker"))
    with pytest.raises(CacheError, match=r"contains '\$'"):
        DiskCache(tmp_path / spelling)
    assert not (tmp_path / spelling).exists()


def test_dollar_in_xdg_cache_home_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_default_cache: None
) -> None:
    key, mat = plant_cache(tmp_path / "attacker" / "kerneldsl", b"evil cubin")
    monkeypatch.setenv("KD_ATTACKER", str(tmp_path / "attacker"))
    monkeypatch.delenv("KERNELDSL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "$KD_ATTACKER"))
    with pytest.raises(CacheError, match=r"contains '\$'"):
        get_default_cache().get(key, mat)


def test_directory_opened_elsewhere_than_checked_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setattr(os.path, "expandvars", lambda path: str(elsewhere))
    with pytest.raises(UnsafeCacheDirError, match="not the checked cache directory"):
        DiskCache(tmp_path / "cache")


def test_symlinked_database_is_refused(tmp_path: Path) -> None:
    DiskCache(tmp_path / "theirs").close()
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    (path / "cache.db").symlink_to(tmp_path / "theirs" / "cache.db")
    with pytest.raises(UnsafeCacheDirError, match="symlink"):
        DiskCache(path)


@pytest.mark.parametrize("name", ["cache.db", "cache.db-wal", "cache.db-shm"])
def test_database_writable_by_others_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "cache"
    DiskCache(path).close()
    (path / name).touch()
    (path / name).chmod(0o666)
    with pytest.raises(UnsafeCacheDirError, match=f"{name} is writable by group or others"):
        DiskCache(path)


def test_database_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cache"
    DiskCache(path).close()
    real_lstat = os.lstat

    def foreign(path: str | os.PathLike[str]) -> os.stat_result:
        fields = list(real_lstat(path))
        if os.fspath(path).endswith("cache.db"):
            fields[4] += 1  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(os, "lstat", foreign)
    with pytest.raises(UnsafeCacheDirError, match="cache.db is owned by uid"):
        DiskCache(path)


def test_unknown_user_in_cache_dir_is_an_error(monkeypatch: pytest.MonkeyPatch, no_default_cache: None) -> None:
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", "~kerneldsl-no-such-user/kd")
    with pytest.raises(CacheError, match="~kerneldsl-no-such-user"):
        get_default_cache()


def test_relative_cache_dir_in_environment_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_default_cache: None
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", "relative/kd")
    with pytest.raises(CacheError, match="absolute"):
        get_default_cache()
    assert not (tmp_path / "relative").exists()


def test_relative_directory_argument_is_fixed_at_construction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with DiskCache("relative") as cache:
        monkeypatch.chdir(tmp_path / "elsewhere")
        put(cache, b"\x01" * 100_000)
        assert cache.directory == tmp_path / "relative"
    assert len(list((tmp_path / "relative").rglob("*.val"))) == 1
    assert list((tmp_path / "elsewhere").iterdir()) == []


# --- permissions -------------------------------------------------------------------------


def test_directory_and_created_parents_are_private(tmp_path: Path) -> None:
    old_umask = os.umask(0)
    try:
        DiskCache(tmp_path / "a" / "b" / "c").close()
    finally:
        os.umask(old_umask)
    for created in ("a", "a/b", "a/b/c"):
        assert stat.S_IMODE((tmp_path / created).stat().st_mode) == 0o700, created


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_directory_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "shared"
    path.mkdir()
    path.chmod(mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UnsafeCacheDirError, match="writable by group or others") as raised:
            DiskCache(path)
    assert str(path) in str(raised.value)
    assert not (path / "cache.db").exists()


def test_directory_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "theirs"
    path.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: path.stat().st_uid + 1)
    with pytest.raises(UnsafeCacheDirError, match="owned by uid") as raised:
        DiskCache(path)
    assert str(path) in str(raised.value)


def test_files_and_directories_are_private_under_permissive_umask(tmp_path: Path) -> None:
    path = tmp_path / "cache"
    old_umask = os.umask(0)
    try:
        with DiskCache(path) as cache:
            put(cache, b"\x01" * 100_000)
            put(cache, b"inline", arch="sm_90")
            modes = {str(p.relative_to(path)): stat.S_IMODE(p.lstat().st_mode) for p in path.rglob("*")}
    finally:
        os.umask(old_umask)
    assert {"cache.db", "cache.db-wal", "cache.db-shm"} <= modes.keys()
    assert any(name.endswith(".val") for name in modes)
    expected = {name: 0o700 if (path / name).is_dir() else 0o600 for name in modes}
    assert modes == expected


@pytest.mark.parametrize("loosened", ["file", "subdirectory"])
def test_value_writable_by_others_is_evicted(cache: DiskCache, caplog: pytest.LogCaptureFixture, loosened: str) -> None:
    key, mat = put(cache, b"\xab" * 100_000)
    (value_file,) = Path(str(cache.directory)).rglob("*.val")
    (value_file if loosened == "file" else value_file.parent).chmod(0o777)
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    assert cache.get(key, mat) is None
    assert len(cache_warnings(caplog)) == 1
    assert not value_file.exists()


def test_value_file_owned_by_another_user_is_evicted(
    cache: DiskCache, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, mat = put(cache, b"\xab" * 100_000)
    (value_file,) = Path(str(cache.directory)).rglob("*.val")
    monkeypatch.setattr(os, "getuid", lambda: value_file.stat().st_uid + 1)
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    assert cache.get(key, mat) is None
    assert len(cache_warnings(caplog)) == 1
    assert not value_file.exists()


def test_symlinked_value_file_is_evicted_and_its_target_kept(
    cache: DiskCache, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    key, mat = put(cache, b"\xab" * 100_000)
    (value_file,) = Path(str(cache.directory)).rglob("*.val")
    planted = tmp_path / "planted"
    value_file.rename(planted)
    value_file.symlink_to(planted)
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    assert cache.get(key, mat) is None
    assert len(cache_warnings(caplog)) == 1
    assert not value_file.is_symlink()
    assert planted.exists()


def test_write_into_subdirectory_writable_by_others_degrades_to_memory(
    cache: DiskCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(cache, b"\xab" * 100_000)
    (value_file,) = Path(str(cache.directory)).rglob("*.val")
    value_file.parent.chmod(0o777)
    subdir = str(value_file.parent.relative_to(Path(str(cache.directory))))
    forced = f"{subdir}/{'0' * 28}.val"
    monkeypatch.setattr(values.BytesOnlyDisk, "filename", lambda self, key, value: (forced, None))
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        key, mat = put(cache, b"\xcd" * 100_000, arch="sm_90")
    assert cache.in_memory
    assert cache.get(key, mat) == b"\xcd" * 100_000
    assert [p.name for p in value_file.parent.iterdir()] == [value_file.name]


# --- degrading ---------------------------------------------------------------------------


def _degrades_once(make: object, caplog: pytest.LogCaptureFixture) -> DiskCache:
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opened = make()  # type: ignore[operator]
    assert [w.category for w in caught] == [RuntimeWarning]
    assert len(cache_warnings(caplog)) == 1
    assert opened.in_memory and opened.directory is None
    return opened


def test_path_beneath_a_file_degrades_to_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    memory = _degrades_once(lambda: DiskCache(blocker / "cache"), caplog)
    key, mat = put(memory, b"cubin")
    assert memory.get(key, mat) == b"cubin"
    assert [entry.key for entry in memory.entries()] == [key]
    assert memory.volume() > len(b"cubin")
    assert memory.clear() == 1
    assert memory.get(key, mat) is None


def test_corrupt_database_degrades_to_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    (path / "cache.db").write_bytes(b"this is not a database" * 100)
    memory = _degrades_once(lambda: DiskCache(path), caplog)
    key, mat = put(memory, b"cubin")
    assert memory.get(key, mat) == b"cubin"


def test_disk_failure_after_opening_degrades_to_memory(
    cache: DiskCache, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(diskcache.Cache, "set", broken)
    monkeypatch.setattr(diskcache.Cache, "get", broken)
    caplog.set_level(logging.WARNING, logger="kerneldsl.cache")
    with pytest.warns(RuntimeWarning, match="disk I/O error"):
        key, mat = put(cache, b"cubin")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get(key, mat) == b"cubin"
        put(cache, b"other", arch="sm_90")
    assert cache.in_memory
    assert len(cache_warnings(caplog)) == 1


# --- size bound --------------------------------------------------------------------------


def test_least_recently_used_entries_are_evicted(tmp_path: Path) -> None:
    limit, chunk = 1024**2, 300 * 1024
    for bounded in (DiskCache(tmp_path / "cache", size_limit=limit), degraded_cache(tmp_path, limit)):
        stored = {name: put(bounded, name.encode() * chunk, kernel=name) for name in "abc"}
        time.sleep(0.01)
        assert bounded.get(*stored["a"]) == b"a" * chunk  # a is now more recent than b and c
        for name in "de":
            time.sleep(0.01)
            stored[name] = put(bounded, name.encode() * chunk, kernel=name)
            assert bounded.volume() <= limit
        alive = {name for name, (key, mat) in stored.items() if bounded.get(key, mat) is not None}
        assert alive == {"a", "d", "e"}, bounded
        bounded.close()


# --- concurrency -------------------------------------------------------------------------

WORKER = r"""
import json, os, sys, time
from kerneldsl.cache import DiskCache, cache_key
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):  # start together, for contention
    time.sleep(0.001)
cache = DiskCache(sys.argv[1])
good = 0
for _ in range(3):
    items = []
    for i in range(20):
        mat = {"kernel": f"k{i}", "arch": "sm_80"}
        payload = bytes([i]) * (50_000 if i % 2 else 500)
        cache.put(cache_key(mat), payload, mat)
        items.append((cache_key(mat), mat, payload))
    good += sum(cache.get(key, mat) == payload for key, mat, payload in items)
print(json.dumps({"good": good, "in_memory": cache.in_memory}))
"""


def test_concurrent_processes_share_one_entry_per_key(tmp_path: Path) -> None:
    path, go = tmp_path / "cache", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )  # fmt: skip
        for _ in range(4)
    ]
    try:
        assert [worker.stdout.readline() for worker in workers] == ["ready\n"] * 4  # type: ignore[union-attr]
        go.touch()
        for worker in workers:
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
            assert json.loads(out) == {"good": 60, "in_memory": False}, err
            assert "evicted" not in err
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    with DiskCache(path) as shared:
        entries = shared.entries()
    assert sorted(e.material["kernel"] for e in entries) == sorted(f"k{i}" for i in range(20))
    with diskcache.Cache(str(path)) as raw:
        assert len(raw) == 20


# --- listing and explain -----------------------------------------------------------------


def test_entries_volume_and_clear(any_cache: DiskCache) -> None:
    before = time.time()
    stored = [put(any_cache, bytes(10 * n), arch=f"sm_{n}") for n in (70, 80, 90)]
    entries = sorted(any_cache.entries(), key=lambda e: e.size)
    assert [(e.key, e.material, e.size) for e in entries] == [
        (key, mat, 10 * n) for (key, mat), n in zip(stored, (70, 80, 90))
    ]
    assert all(before - 1 <= e.stored_at <= time.time() + 1 for e in entries)
    assert any_cache.volume() >= 2400
    assert any_cache.clear() == 3
    assert any_cache.entries() == []
    assert any_cache.get(*stored[0]) is None


def test_explain(any_cache: DiskCache) -> None:
    assert any_cache.explain(material()) == "miss: no entries for kernel 'saxpy'"
    put(any_cache, b"a")
    put(any_cache, b"b", arch="sm_90", options=["-O2"], source=SOURCE + "// edited\n")
    prefix = "miss: nearest entry for kernel 'saxpy' differs in: "
    assert any_cache.explain(material()) == "hit"
    assert any_cache.explain(material(arch="sm_86")) == prefix + "arch ('sm_80' -> 'sm_86')"
    assert any_cache.explain(material(options=["-O2"])) == prefix + "options"
    assert any_cache.explain(material(arch="sm_90", options=["-O2"])) == prefix + "source"
    assert any_cache.explain(material(extra=1)) == prefix + "extra (absent -> 1)"
    assert any_cache.explain(material(kernel="gemm")) == "miss: no entries for kernel 'gemm'"


# --- network filesystems -----------------------------------------------------------------


def test_mount_type_uses_longest_mount_point() -> None:
    mounts = "/dev/sda1 / ext4 rw 0 0\nserver:/export /home nfs4 rw 0 0\ntmpfs /home/me/fast\\040dir tmpfs rw 0 0\n"
    assert location._mount_fstype("/home/me/.cache/kerneldsl", mounts) == "nfs4"
    assert location._mount_fstype("/home/me/fast dir/kerneldsl", mounts) == "tmpfs"
    assert location._mount_fstype("/homestead", mounts) == "ext4"


def test_network_filesystem_is_warned_about_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(location, "_filesystem_type", lambda path: "nfs4")
    with pytest.warns(RuntimeWarning, match="nfs4"):
        first = DiskCache(tmp_path / "cache")
    assert not first.in_memory
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DiskCache(tmp_path / "cache").close()
    first.close()


# --- the process-wide cache --------------------------------------------------------------


@pytest.fixture
def no_default_cache() -> Iterator[None]:
    set_default_cache(None)
    yield
    set_default_cache(None)


def test_default_cache_follows_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_default_cache: None
) -> None:
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("KERNELDSL_CACHE_SIZE", "123456")
    default = get_default_cache()
    assert get_default_cache() is default
    assert (default.directory, default.size_limit) == (tmp_path / "env", 123456)
    default.close()
    replacement = DiskCache(tmp_path / "other")
    set_default_cache(replacement)
    assert get_default_cache() is replacement
    replacement.close()


def test_huge_size_in_environment_is_clamped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_default_cache: None
) -> None:
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("KERNELDSL_CACHE_SIZE", str(10**30))
    default = get_default_cache()
    key, mat = put(default, b"cubin")  # was an OverflowError from SQLite
    assert default.get(key, mat) == b"cubin"
    assert (default.size_limit, default.in_memory) == (2**63 - 1, False)
    default.close()


def test_bad_size_in_environment_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_default_cache: None
) -> None:
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("KERNELDSL_CACHE_SIZE", "2GB")
    with pytest.raises(CacheError, match="KERNELDSL_CACHE_SIZE"):
        get_default_cache()


# --- seals, bindings, ancestors, the secret, FIFOs -------------------------------------------------------


def test_value_sealed_under_another_secret_is_a_miss_and_evicted(cache: DiskCache) -> None:
    mat = material()
    key = cache_key(mat)
    with diskcache.Cache(str(cache.directory)) as raw:
        raw.set(key, forge(key, mat, b"MALLORY-CUBIN", secret=b"attacker's own secret, 32 bytes!"))
    assert cache.get(key, mat) is None
    with diskcache.Cache(str(cache.directory)) as raw:
        assert key not in raw


def test_bindings_of_the_wrong_shape_are_evicted_when_listing(cache: DiskCache) -> None:
    good = {"dtypes": {"T": "float32"}, "constants": {"TILE": "128"}, "extents": {}, "aligned": {}, "index_bits": 32}
    put(cache, b"good", bindings=good)
    put(cache, b"bad", bindings={**good, "index_bits": "32; rm -rf"})
    put(cache, b"worse", bindings={**good, "constants": {"TILE": 128}})
    assert [e.material["bindings"] for e in cache.entries()] == [good]


def test_explain_names_each_binding_that_differs(any_cache: DiskCache) -> None:
    bound = {"dtypes": {"T": "float32"}, "constants": {"TILE": "128"}, "extents": {}, "aligned": {}, "index_bits": 32}
    put(any_cache, b"a", bindings=bound)
    other = {**bound, "dtypes": {"T": "float64"}, "constants": {"TILE": "256"}, "index_bits": 64}
    assert any_cache.explain(material(bindings=other, source=SOURCE + "// T=double\n")) == (
        "miss: nearest entry for kernel 'saxpy' differs in: "
        "dtype T: float32 -> float64, constant TILE: 128 -> 256, index width 32 -> 64, source"
    )


@pytest.mark.parametrize("mode", [0o777, 0o775], ids=["world-writable", "group-writable"])
def test_ancestor_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with pytest.raises(UnsafeCacheDirError, match="not sticky"):
        DiskCache(shared / "mine" / "cache")


def test_sticky_ancestor_like_tmp_is_accepted(tmp_path: Path) -> None:
    shared = tmp_path / "sticky"
    shared.mkdir()
    shared.chmod(0o1777)
    with DiskCache(shared / "cache") as opened:
        assert not opened.in_memory


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root to hand a directory to another uid")
def test_ancestor_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UnsafeCacheDirError, match="uid 65534"):
        DiskCache(theirs / "cache")


_SWAP = 'mv "$1" "$1.old" && mkdir -m 700 "$1" && printf "attacker\'s database" > "$1/cache.db"'


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root to act as a second user (os.setuid)")
def test_directory_swapped_by_the_owner_of_a_parent_is_never_read_from_another_thread() -> None:
    import tempfile
    import threading

    base = Path(tempfile.mkdtemp(prefix="kerneldsl-swap-"))  # under /tmp, which the other user can reach
    try:
        base.chmod(0o755)
        parent = base / "parent"
        parent.mkdir(mode=0o755)
        cache = DiskCache(parent / "cache")
        key, mat = put(cache, b"victim's cubin")
        os.chown(parent, 65534, 65534)  # the parent now belongs to the attacker
        swap = ["/bin/sh", "-c", _SWAP, "sh", str(parent / "cache")]  # the attacker's own shell, as uid 65534
        subprocess.run(swap, user=65534, group=65534, cwd=base, check=True, timeout=60)
        assert (parent / "cache" / "cache.db").read_bytes() == b"attacker's database"
        found: list[object] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            worker = threading.Thread(target=lambda: found.append(cache.get(key, mat)))  # a new SQLite connection
            worker.start()
            worker.join(timeout=60)
        assert found == [None] and cache.in_memory
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True, timeout=60)


@pytest.fixture
def own_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(cache_secret, "_secrets", {})
    return cache_module.default_secret_path()


def test_secret_readable_by_others_is_replaced_with_a_warning(own_secret: Path) -> None:
    own_secret.parent.mkdir(parents=True, mode=0o700)
    own_secret.write_bytes(b"k" * 32)
    own_secret.chmod(0o644)
    with pytest.warns(RuntimeWarning, match=str(own_secret)):
        key = cache_module.signing_key()
    assert key is not None and key != b"k" * 32 and own_secret.read_bytes() == key
    assert stat.S_IMODE(own_secret.stat().st_mode) == 0o600


def _guarded(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter, failing (not hanging) the test if it blocks."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=environment, cwd=REPO, timeout=60
    )


def test_fifo_at_cache_db_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    os.mkfifo(path / "cache.db", 0o600)
    code = "import sys\nfrom kerneldsl.cache import DiskCache\nDiskCache(sys.argv[1])"
    child = _guarded(code, str(path))
    assert child.returncode != 0 and "UnsafeCacheDirError" in child.stderr and "not a file" in child.stderr


def test_fifo_at_a_value_file_is_a_miss_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "cache"
    with DiskCache(path) as cache:
        key, mat = put(cache, b"\xab" * 100_000)
    (value_file,) = path.rglob("*.val")
    value_file.unlink()
    os.mkfifo(value_file, 0o600)
    code = (
        "import json, sys\nfrom kerneldsl.cache import DiskCache\n"
        "cache = DiskCache(sys.argv[1])\nprint(cache.get(sys.argv[2], json.loads(sys.argv[3])), cache.entries())"
    )
    child = _guarded(code, str(path), key, json.dumps(mat))
    assert (child.returncode, child.stdout.strip()) == (0, "None []"), child.stderr


def test_fifo_at_the_secret_means_no_secret_without_hanging(tmp_path: Path) -> None:
    secret = tmp_path / "data" / "kerneldsl" / "secret"
    secret.parent.mkdir(parents=True, mode=0o700)
    os.mkfifo(secret, 0o600)
    code = "import sys\nfrom kerneldsl.cache import signing_key\nprint(signing_key())"
    child = _guarded(code, env={"XDG_DATA_HOME": str(tmp_path / "data")})
    assert (child.returncode, child.stdout.strip()) == (0, "None"), child.stderr
