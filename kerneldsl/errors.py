"""Every exception kerneldsl raises, in one hierarchy.

Catch ``KernelDSLError`` for anything of ours; the subclasses say which stage failed
(declaration, binding, compilation, cache, CUDA driver, session ownership, BLAS, fusion).
Where a standard exception fits the meaning (``TypeError`` for a wrong dtype, ``ValueError``
for a bad value) the class derives from it too, so generic handlers keep working.
"""

from __future__ import annotations


def _rebuild(cls: type[BaseException], args: tuple[object, ...], state: dict[str, object]) -> BaseException:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class KernelDSLError(Exception):
    """Base of every kerneldsl exception."""

    def __reduce__(self) -> tuple[object, ...]:
        """Rebuilt without calling ``__init__`` (whose arguments differ per class), so an error
        raised on a ``kerneldsl.distributed`` worker reaches the client as itself."""
        return (_rebuild, (type(self), self.args, self.__dict__))


# --- declaration and binding -------------------------------------------------------------


class DeclarationError(KernelDSLError, TypeError):
    """A ``@kd.kernel`` signature is invalid; raised at decoration time."""

    def __init__(self, kernel: str, param: str | None, message: str) -> None:
        where = f"parameter {param!r} of kernel {kernel!r}" if param else f"kernel {kernel!r}"
        super().__init__(f"{where}: {message}")
        self.kernel = kernel
        self.param = param


class BindingError(KernelDSLError, TypeError):
    """Call arguments do not fit the declared signature; nothing was launched or copied."""

    def __init__(self, kernel: str, param: str | None, message: str) -> None:
        where = f"argument {param!r} of kernel {kernel!r}" if param else f"call of kernel {kernel!r}"
        super().__init__(f"{where}: {message}")
        self.kernel = kernel
        self.param = param


class ScalarConversionError(BindingError, ValueError):
    """A scalar argument would change its value converted to the declared type (a numpy scalar
    that rounds, a float for an integer); ``declared`` and ``given`` name the two types."""

    def __init__(self, kernel: str, param: str, declared: str, given: str, message: str) -> None:
        super().__init__(kernel, param, message)
        self.declared = declared
        self.given = given


class ShapeMismatchError(BindingError, ValueError):
    """A shape symbol got two different extents, or a fixed extent was not met."""


class ReadOnlyArrayError(BindingError):
    """A read-only array was passed where the kernel writes (Out / InOut)."""


class StridedArrayError(BindingError, ValueError):
    """A strided (non C-contiguous) array where contiguous memory is needed."""


class AliasingError(BindingError, ValueError):
    """The same memory was passed to two parameters and at least one of them is written."""


class ProxyAttributeError(KernelDSLError, AttributeError):
    """The body function asked a parameter proxy (``{y.shpe}``) for an attribute it does not have;
    ``valid`` lists those it has."""

    def __init__(self, kernel: str, param: str, attribute: str, valid: tuple[str, ...]) -> None:
        super().__init__(
            f"parameter {param!r} of kernel {kernel!r} has no attribute {attribute!r} in the body function "
            f"(it has: {', '.join(valid)})"
        )
        self.kernel = kernel
        self.param = param
        self.attribute = attribute
        self.valid = valid


class ViewError(KernelDSLError, ValueError):
    """A view was asked for that the array's memory cannot express (a reshape that needs a copy)."""


class ArrayScalarError(KernelDSLError, TypeError):
    """An array that is not one value converted to a Python scalar (``float(a)``, ``int(a)``,
    ``operator.index(a)``): NumPy's TypeError, with its message."""


class ArraySizeError(KernelDSLError, ValueError):
    """An array of other than one element where one value is needed (``bool(a)``, ``a.item()``):
    NumPy's ValueError, with its message."""


# --- compilation -------------------------------------------------------------------------


class KernelCompileError(KernelDSLError):
    """NVRTC rejected the generated source of ``kernel``; ``log`` is NVRTC's, ``mapped`` points
    into user code (the body's file and line, the line within the body)."""

    def __init__(self, message: str, log: str, mapped: list[str], source: str, kernel: str) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.log = log
        self.mapped = mapped
        self.source = source


class InvalidArchError(KernelDSLError, ValueError):
    """A target architecture NVRTC cannot compile for, or one spelled wrongly."""


class InvalidOptionError(KernelDSLError, ValueError):
    """A compiler option kerneldsl refuses before NVRTC sees it."""


class NvrtcNotFoundError(KernelDSLError, ImportError):
    """The NVRTC library could not be loaded."""


# --- cache -------------------------------------------------------------------------------


class CacheError(KernelDSLError):
    """The disk cache cannot be used as configured."""


class UnsafeCacheDirError(CacheError, PermissionError):
    """The cache directory is owned by another user or writable by others."""


class InvalidCacheEntryError(CacheError, ValueError):
    """A stored entry does not decode to what was stored (an image's metadata of the wrong type or
    range): it is evicted and rebuilt, never raised to the caller."""


# --- CUDA driver -------------------------------------------------------------------------


class CudaError(KernelDSLError, RuntimeError):
    """A CUDA driver call failed: ``code`` and ``name`` are the CUresult, ``api`` the call."""

    def __init__(self, code: int, name: str, api: str, detail: str = "") -> None:
        text = f"{api} failed with {name} ({code})"
        super().__init__(f"{text}: {detail}" if detail else text)
        self.code = code
        self.name = name
        self.api = api


class OutOfMemoryError(CudaError, MemoryError):
    """A device allocation failed for lack of memory; ``requested`` is the size in bytes."""

    def __init__(self, code: int, name: str, api: str, requested: int) -> None:
        super().__init__(code, name, api, f"could not allocate {requested} bytes of device memory")
        self.requested = requested


class LaunchConfigError(KernelDSLError, ValueError):
    """A launch configuration the device cannot run, refused before the launch: a grid, block or
    shared-memory value past its limit, negative, or not an integer. The message names the
    dimension and the limit, and ``kernel`` (when the launch was a kernel's) the kernel."""

    def __init__(self, message: str, kernel: str | None = None) -> None:
        super().__init__(f"kernel {kernel!r}: {message}" if kernel else message)
        self.message = message
        self.kernel = kernel

    def naming(self, kernel: str) -> LaunchConfigError:
        """This error as raised by a launch of ``kernel`` (the session's checks know only the
        function); itself when it names a kernel already."""
        if self.kernel is not None:
            return self
        named = type(self)(self.message, kernel)
        named.__traceback__ = self.__traceback__
        return named


class DeviceInUseError(KernelDSLError, RuntimeError):
    """``reset_device`` was asked to reset a device that healthy open sessions still use."""


class LaunchError(CudaError):
    """A launch was refused (bad configuration, too many resources); the session stays usable."""


class StickyCudaError(CudaError):
    """An error that corrupts the CUDA context (illegal address, trap, ...)."""


class DriverNotFoundError(KernelDSLError, RuntimeError):
    """No CUDA driver library on this machine."""


class KernelFaultError(LaunchError):
    """A kernel failed while it ran on the CPU device: an ``assert`` or ``__trap``, a barrier or
    warp collective that not every thread reached, a construct it does not emulate. The message
    names the kernel, the block, the thread and the body's line; the session stays usable."""


class CheckError(KernelFaultError):
    """Checked execution on the CPU device (``checks=``) found a bug in a kernel. The message names
    the kernel, the block and thread(s), what was accessed and the line(s); ``sites`` holds the
    ``file:line`` places it names, in order."""

    def __init__(self, code: int, name: str, api: str, detail: str, sites: tuple[str, ...] = ()) -> None:
        super().__init__(code, name, api, detail)
        self.detail = detail
        self.sites = sites


class BoundsCheckError(CheckError, IndexError):
    """``bounds``: an index outside an array parameter's extent (or a fixed-size array's)."""


class RaceCheckError(CheckError):
    """``races``: two threads of a block touched one address, at least one writing, with no barrier
    between them; the message names both threads and both lines."""


class InitCheckError(CheckError):
    """``init``: a read of shared memory that no thread of the block wrote."""


class SyncCheckError(CheckError):
    """``sync``: a barrier or warp collective that not every thread it names reaches, or reaches at
    another place (a barrier in divergent code)."""


class UndefinedBehaviorError(CheckError):
    """``undefined``: UndefinedBehaviorSanitizer's checks (signed overflow, bad shifts, ...)."""


class CheckConfigError(KernelDSLError, ValueError):
    """A ``checks=`` value (or ``$KERNELDSL_CHECKS``) that names no check, or checks that cannot run
    together."""


class HostCompilerNotFoundError(KernelDSLError, RuntimeError):
    """The CPU device needs a host C++ compiler and found none that runs; the message says what
    to install."""


class UnsupportedOnCpuError(KernelDSLError, NotImplementedError):
    """A kernel uses what has no meaning on the CPU device (user inline PTX, CUB, cooperative
    groups, thread-block clusters), refused before compiling with the construct named."""


class NoDeviceError(KernelDSLError, RuntimeError):
    """A driver is present but the requested device is not."""


# --- session ownership ---------------------------------------------------------------------


class OwnershipError(KernelDSLError, RuntimeError):
    """A handle was used where its owning session does not allow it."""


class ClosedError(OwnershipError):
    """The handle or its session was closed."""


class WrongSessionError(OwnershipError, ValueError):
    """Handles from different sessions or devices were mixed in one operation."""


class InvalidStreamError(KernelDSLError, TypeError):
    """``stream=`` was neither None nor a ``kd.Stream`` itself (a subclass or a look-alike is
    refused unread: its attributes could run code in the middle of a launch)."""


class ForkedProcessError(OwnershipError):
    """A CUDA handle created in a parent process was used in a forked child."""


class SessionPoisonedError(OwnershipError):
    """An earlier sticky CUDA error broke the session's context; start a new process."""


class SessionCloseError(KernelDSLError, RuntimeError):
    """``Session.close()`` met failures; it finished anyway and ``errors`` lists each one."""

    def __init__(self, errors: list[BaseException]) -> None:
        listing = "; ".join(f"{type(e).__name__}: {e}" for e in errors)
        super().__init__(f"{len(errors)} error(s) while closing the session: {listing}")
        self.errors = errors


# --- libraries built on the runtime ----------------------------------------------------------


class BlasError(KernelDSLError, RuntimeError):
    """cuBLAS returned a failure status; ``status`` is its code."""

    def __init__(self, status: int, name: str, api: str) -> None:
        super().__init__(f"{api} failed with {name} ({status})")
        self.status = status
        self.name = name
        self.api = api


class ExtraNotInstalledError(KernelDSLError, ImportError):
    """A feature needs an optional extra (``pip install 'kerneldsl[NAME]'``) that is not installed."""


class BlasNotAvailableError(ExtraNotInstalledError):
    """The optional ``kerneldsl[blas]`` extra is not installed."""


class DistributedNotAvailableError(ExtraNotInstalledError):
    """The optional ``kerneldsl[distributed]`` extra (Dask distributed, cloudpickle, cryptography) is not installed."""


class HeadersNotAvailableError(ExtraNotInstalledError):
    """A build includes CUDA headers (CUB, cooperative groups, libcu++) and the optional
    ``kerneldsl[headers]`` extra (nvidia-cuda-runtime, nvidia-cuda-cccl) is not installed."""


class NvtxNotAvailableError(ExtraNotInstalledError):
    """NVTX ranges were asked for (``KERNELDSL_NVTX=1`` or ``kd.profile()``) and the optional
    ``kerneldsl[nvtx]`` extra (the ``nvtx`` package) is not installed."""


class TorchNotAvailableError(ExtraNotInstalledError):
    """``kd.torch`` was used and the optional ``kerneldsl[torch]`` extra (PyTorch) is not installed."""


class AutotuneError(KernelDSLError, RuntimeError):
    """No configuration of a ``@kd.autotune`` kernel compiled and launched for a call's key:
    ``failures`` maps each configuration's label to why it was skipped."""

    def __init__(self, message: str, failures: dict[str, str]) -> None:
        super().__init__(message)
        self.failures = failures


class FusionError(KernelDSLError, TypeError):
    """A ``@kd.fuse`` function used something that cannot be fused."""


class OperandDtypeError(KernelDSLError, TypeError):
    """An op was given operand dtypes it is not defined for (``bitwise_and`` of floats,
    ``sign`` of bools): NumPy refuses the same combination."""


class ComplexUnsupportedError(OperandDtypeError):
    """A complex operand where the op, reduction or scan has no complex meaning in kerneldsl
    (ordering: ``less``, ``maximum``, ``min``, ``argmax``; rounding: ``floor``): the message names both."""


# --- the remote plane (kerneldsl.distributed) -----------------------------------------------------


class DistributedError(KernelDSLError, RuntimeError):
    """A ``kerneldsl.distributed`` call could not be placed, sent or completed."""


class NoWorkerError(DistributedError, LookupError):
    """No live GPU worker matches the worker name or profile a call asked for."""


class WrongWorkerError(DistributedError, ValueError):
    """Remote arrays of one call live on different workers; ``workers`` names them."""

    def __init__(self, what: str, workers: list[str]) -> None:
        super().__init__(
            f"{what}: its remote arrays live on different workers ({', '.join(workers)}); "
            "copy them to one with ra.to_worker(name)"
        )
        self.workers = workers


class ShippingError(DistributedError, TypeError):
    """A kernel, function or argument cannot be pickled to send to a worker."""


class Backpressure(DistributedError):
    """``block=False`` and the worker already has ``max_in_flight`` calls in flight."""


class WorkerLostError(DistributedError):
    """The worker running a call died (killed, out of memory, crashed); the call's work is gone."""


class RemoteArrayLostError(WorkerLostError):
    """The worker that held a remote array died or restarted: its data is gone."""


class CallCancelledError(DistributedError):
    """The remote call was cancelled before it ran (a call already running finishes; its result is dropped)."""


class InsecureClusterWarning(UserWarning):
    """A ``LocalGPUCluster`` started with ``security=False``: its ports speak plain TCP, so any
    user of this machine can connect and run code as the cluster's owner. A warning, not an
    error: on a machine of one user it is a choice (``warnings.simplefilter`` silences it)."""


class PerBlockExtentWarning(UserWarning):
    """A kernel body writes ``out[blockIdx.x]`` to an array whose declared extent can be smaller
    than the grid's blocks (``kd.Out[T, m]`` or ``kd.Out[T, 1]`` for ``grid=kd.cdiv(n, 256)``),
    so a call passing fewer elements than blocks writes past its end. A warning, not an error:
    it comes from a textual check of the body, which a guard (``if (blockIdx.x < m)``) can make
    safe; declaring the grid's expression as the extent (``kd.Out[T, kd.cdiv(n, 256)]``) checks
    every call instead."""


# --- PyTorch operators (kerneldsl.torch) ------------------------------------------------------------


class TorchOpError(KernelDSLError, TypeError):
    """A kernel, fused function or op cannot become the PyTorch operator asked for: the message
    names the operator, the parameter at fault (if one is) and why."""

    def __init__(self, op: str, param: str | None, message: str) -> None:
        where = f"parameter {param!r} of torch operator {op!r}" if param else f"torch operator {op!r}"
        super().__init__(f"{where}: {message}")
        self.op = op
        self.param = param
