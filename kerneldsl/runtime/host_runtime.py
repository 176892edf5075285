"""The CPU device's native half: its runtime library (thread pool, fibers, launch entries with
``cuLaunchKernel``'s ABI) and the kernel modules, loaded into this process.

The runtime library is compiled once per host compiler from ``templates/host/kd_host_runtime.cpp``
and kept in the disk cache like a kernel image (sealed, keyed on the compiler's identity, the
source and the flags); it is loaded with ``RTLD_GLOBAL`` so that kernel modules, loaded
``RTLD_LOCAL`` after it, resolve the runtime's symbols. Images are written to a private
temporary file, loaded and unlinked at once: nothing stays on disk that another user could swap.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
from functools import lru_cache
from typing import Any

from .. import cache as disk_cache
from .. import logs
from .host_toolchain import HOST_ABI, compile_shared, host_compiler, shim_dir

log = logs.get("runtime.host")

RUNTIME_FLAGS = ("-O2", "-pthread")
MAGIC = 0x4644484B  # 'KDHF': a kernel module's exported function descriptor
_ELF = b"\x7fELF"
_lock = threading.Lock()

LAUNCH_ARGS: list[Any] = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


class FunctionDescriptor(ctypes.Structure):
    """``kd_host_function`` (templates/host/kd_host.h): what a module exports per kernel."""

    _fields_ = [
        ("magic", ctypes.c_uint),
        ("abi", ctypes.c_uint),
        ("name", ctypes.c_char_p),
        ("run_blocks", ctypes.c_void_p),
        ("flags", ctypes.c_uint),
        ("nparams", ctypes.c_uint),
    ]


def runtime_material() -> dict[str, Any]:
    """What the runtime library's image depends on: the compiler, the flags, its source and the shim."""
    folder = shim_dir()
    digest = hashlib.sha256()
    for name in ("kd_host_runtime.cpp", "kd_host.h"):
        digest.update((folder / name).read_bytes())
    return {
        "format": disk_cache.CACHE_FORMAT_VERSION,
        "kernel": "kd_host_runtime",
        "output": "host-runtime",
        "compiler": host_compiler().identity(),
        "flags": list(RUNTIME_FLAGS),
        "source": digest.hexdigest(),
        "abi": HOST_ABI,
    }


@lru_cache(maxsize=1)
def _kept_images() -> str:
    """A private folder, removed at exit, for checked modules' files: AddressSanitizer reads their
    line tables when it reports (the process is ending then, so nothing else reads them)."""
    folder = tempfile.TemporaryDirectory(prefix="kerneldsl-checked-")
    _kept.append(folder)
    return folder.name


_kept: list[tempfile.TemporaryDirectory[str]] = []
CHECKED_MARKER = b"kd_host_checks_v1"  # the symbol a checked module exports


def load_image(image: bytes, global_symbols: bool = False) -> ctypes.CDLL:
    """dlopen ``image`` (a shared library's bytes) from a private temporary file, unlinked at once
    (a checked module's file stays, in a private folder, until exit)."""
    if not bytes(image[:4]) == _ELF:
        raise OSError("not a shared library for this host (a cubin or PTX cannot run on the CPU device)")
    if CHECKED_MARKER in image:
        fd, path = tempfile.mkstemp(prefix="module-", suffix=".so", dir=_kept_images())
        with os.fdopen(fd, "wb") as f:
            f.write(image)
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL | os.RTLD_NOW)
    fd, path = tempfile.mkstemp(prefix="kerneldsl-host-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(image)
        mode = ctypes.RTLD_GLOBAL if global_symbols else ctypes.RTLD_LOCAL
        return ctypes.CDLL(path, mode=mode | os.RTLD_NOW)
    finally:
        os.unlink(path)


@lru_cache(maxsize=1)
def runtime_library() -> ctypes.CDLL:
    """The runtime library, compiled on first use in any process and loaded once per process."""
    with _lock:
        material = runtime_material()
        key = disk_cache.cache_key(material)
        store = disk_cache.get_default_cache()
        image = store.get(key, material)
        if image is None:
            source = (shim_dir() / "kd_host_runtime.cpp").read_text()
            flags = (*RUNTIME_FLAGS, f"-I{shim_dir()}")
            image = compile_shared(host_compiler(), source, flags, "kd_host_runtime")
            store.put(key, image, material)
            log.debug("compiled the CPU device's runtime library (%d bytes)", len(image))
        try:
            lib = load_image(image, global_symbols=True)
        except OSError as exc:
            raise RuntimeError(
                f"the CPU device's runtime library could not be loaded ({exc}); it needs a little of glibc's "
                "static TLS reserve: import kerneldsl and open the CPU device's session before libraries that use "
                "it all up, or raise it with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=2048"
            ) from exc
    lib.kd_host_launch.argtypes = LAUNCH_ARGS
    lib.kd_host_launch.restype = ctypes.c_int
    lib.kd_host_launch_ex.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    lib.kd_host_launch_ex.restype = ctypes.c_int
    lib.kd_host_last_error.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
    lib.kd_host_last_error.restype = ctypes.c_size_t
    lib.kd_host_workers.restype = ctypes.c_int
    lib.kd_host_module_base_v1.argtypes = (ctypes.c_void_p,)
    lib.kd_host_module_base_v1.restype = ctypes.c_ulong
    lib.kd_host_check_ignore_v1.argtypes = (ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    lib.kd_host_check_ignore_v1.restype = None
    lib.kd_host_check_fresh_v1.argtypes = (ctypes.c_void_p, ctypes.c_ulonglong)
    lib.kd_host_check_fresh_v1.restype = None
    lib.kd_host_check_written_v1.argtypes = (ctypes.c_void_p, ctypes.c_ulonglong)
    lib.kd_host_check_written_v1.restype = None
    lib.kd_host_check_forget_v1.argtypes = (ctypes.c_void_p,)
    lib.kd_host_check_forget_v1.restype = None
    pool, pointer, size = ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_size_t
    for name, args, result in (
        ("kd_host_mem_alloc_v1", (ctypes.POINTER(pointer), size, pool, ctypes.c_void_p), ctypes.c_int),
        ("kd_host_mem_release_v1", (pointer, ctypes.c_int), ctypes.c_int),
        ("kd_host_mem_free_async_v1", (pointer, ctypes.c_void_p), ctypes.c_int),
        ("kd_host_mem_size_v1", (pointer,), size),
        ("kd_host_mem_kept_v1", (pool, size), size),
        ("kd_host_mem_pool_create_v1", (pool,), None),
        ("kd_host_mem_pool_used_v1", (pool,), size),
        ("kd_host_mem_pool_trim_v1", (pool, size), None),
        ("kd_host_mem_pool_destroy_v1", (pool,), None),
        ("kd_host_mem_capture_v1", (ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(pointer), size), size),
        ("kd_host_mem_track_unwritten_v1", (), None),
        ("kd_host_ctx_get_current_v1", (ctypes.POINTER(ctypes.c_void_p),), ctypes.c_int),
        ("kd_host_ctx_push_v1", (ctypes.c_void_p,), None),
        ("kd_host_ctx_pop_v1", (), ctypes.c_void_p),
        ("kd_host_ctx_set_current_v1", (ctypes.c_void_p,), None),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib


def last_error(lib: ctypes.CDLL) -> str:
    """The runtime's message for the last failed launch on this thread ('' when it kept none)."""
    buffer = ctypes.create_string_buffer(4096)
    n = lib.kd_host_last_error(buffer, len(buffer))
    return buffer.value[: min(n, len(buffer) - 1)].decode(errors="replace")


def descriptor(module: ctypes.CDLL, name: str) -> int:
    """The address of kernel ``name``'s descriptor in ``module``, checked; 0 when it has none."""
    try:
        found = FunctionDescriptor.in_dll(module, f"kd_host_fn_{name}")
    except ValueError:
        return 0
    if found.magic != MAGIC or found.abi != HOST_ABI:
        return 0
    return ctypes.addressof(found)


def checked_module_base(module: ctypes.CDLL) -> int:
    """Where a checked module (one built with ``KD_CHECKS``) is loaded; 0 for any other module."""
    try:
        marker = ctypes.c_uint.in_dll(module, "kd_host_checks_v1")
    except ValueError:
        return 0
    lib = runtime_library()
    return int(lib.kd_host_module_base_v1(ctypes.c_void_p(ctypes.addressof(marker))))


def nparams(function: int) -> int:
    """How many parameters the kernel of descriptor address ``function`` takes."""
    return int(FunctionDescriptor.from_address(function).nparams)
