# The public API of kerneldsl/__init__.py's _PUBLIC table, eagerly, for type checkers (the module
# itself imports each name on first use). tests/test_structure.py proves the two name the same.

from . import array_api as array_api
from . import blas as blas
from . import cache as cache
from . import distributed as distributed
from . import errors as errors
from . import torch as torch
from ._version import __version__ as __version__
from .array import ops as ops
from .array.elementwise import elementwise as elementwise
from .array.fusion import fuse as fuse
from .array.ndarray import DeviceArray as DeviceArray
from .array.reduction import reduction as reduction
from .array.scan import scan as scan
from .blas.np_matmul import matmul as matmul
from .device_array import random as random
from .device_array.creation import arange as arange
from .device_array.creation import asarray as asarray
from .device_array.creation import empty as empty
from .device_array.creation import empty_like as empty_like
from .device_array.creation import full as full
from .device_array.creation import full_like as full_like
from .device_array.creation import ones as ones
from .device_array.creation import ones_like as ones_like
from .device_array.creation import zeros as zeros
from .device_array.creation import zeros_like as zeros_like
from .device_array.manipulation import broadcast_to as broadcast_to
from .device_array.manipulation import concatenate as concatenate
from .device_array.manipulation import expand_dims as expand_dims
from .device_array.manipulation import flip as flip
from .device_array.manipulation import moveaxis as moveaxis
from .device_array.manipulation import squeeze as squeeze
from .device_array.manipulation import stack as stack
from .device_array.sessions import Session as Session
from .device_array.sessions import default_session as default_session
from .dtypes import bool_ as bool_
from .dtypes import complex64 as complex64
from .dtypes import complex128 as complex128
from .dtypes import float16 as float16
from .dtypes import float32 as float32
from .dtypes import float64 as float64
from .dtypes import int8 as int8
from .dtypes import int16 as int16
from .dtypes import int32 as int32
from .dtypes import int64 as int64
from .dtypes import uint8 as uint8
from .dtypes import uint16 as uint16
from .dtypes import uint32 as uint32
from .dtypes import uint64 as uint64
from .jit.device_code import DeviceFunction as DeviceFunction
from .jit.device_code import device_function as device_function
from .jit.signature import Const as Const
from .jit.signature import In as In
from .jit.signature import InOut as InOut
from .jit.signature import Out as Out
from .jit.signature import Scalar as Scalar
from .jit.signature import cdiv as cdiv
from .jit.signature import dmax as dmax
from .jit.signature import dmin as dmin
from .jit.signature import sym as sym
from .jit.target import resolve_arch as resolve_arch
from .launch.dispatch import Kernel as Kernel
from .launch.dispatch import kernel as kernel
from .runtime import Event as Event
from .runtime import PinnedArray as PinnedArray
from .runtime import Stream as Stream
from .runtime import reset_device as reset_device
from .runtime.nvtx import profile as profile
from .runtime.selection import devices as devices
from .runtime.selection import is_available as is_available
from .tune import Autotuned as Autotuned
from .tune import autotune as autotune

__all__ = [
    "__version__",
    "array_api",
    "blas",
    "cache",
    "distributed",
    "errors",
    "ops",
    "random",
    "torch",
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
    "elementwise",
    "fuse",
    "broadcast_to",
    "concatenate",
    "expand_dims",
    "flip",
    "moveaxis",
    "squeeze",
    "stack",
    "DeviceArray",
    "reduction",
    "scan",
    "Session",
    "default_session",
    "matmul",
    "DeviceFunction",
    "device_function",
    "Kernel",
    "kernel",
    "bool_",
    "complex64",
    "complex128",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "Event",
    "PinnedArray",
    "Stream",
    "reset_device",
    "profile",
    "devices",
    "is_available",
    "Const",
    "In",
    "InOut",
    "Out",
    "Scalar",
    "cdiv",
    "dmax",
    "dmin",
    "sym",
    "resolve_arch",
    "Autotuned",
    "autotune",
]
