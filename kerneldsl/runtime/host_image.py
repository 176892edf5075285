"""What a CPU-device image (an ELF shared library) holds that a GPU build would refuse: the static
``__shared__`` memory of its kernel.

The shim makes each ``__shared__`` variable a function-local ``static thread_local`` of the
kernel's entry, so the variables are the entry's local thread-local symbols, named
``_ZZ<length><entry>E...`` by the Itanium C++ ABI, and their sizes are in the symbol table.
Shared variables of device functions (``uses=``) are other functions' locals and are not
counted; an image that is not a 64-bit little-endian ELF, or a stripped one, reports None.
"""

from __future__ import annotations

import struct

_ELF64_LE = b"\x7fELF\x02\x01"
_SHT_SYMTAB = 2
_STT_TLS = 6
_SYMBOL = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size
_SECTION = struct.Struct("<IIQQQQIIQQ")  # sh_name, sh_type, flags, addr, offset, size, link, info, align, entsize


def static_shared_bytes(image: bytes, entry: str) -> int | None:
    """Bytes of the ``__shared__`` variables declared in kernel ``entry``'s body; None when the
    image cannot say (not ELF64 little-endian, no symbol table)."""
    data = memoryview(image)
    if bytes(data[:6]) != _ELF64_LE:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    symtabs = [s for s in sections if s[1] == _SHT_SYMTAB]
    if not symtabs:
        return None
    _, _, _, _, offset, size, link, _, _, entsize = symtabs[0]
    strings = sections[link][4]
    prefix = f"_ZZ{len(entry)}{entry}E".encode()
    total = 0
    for at in range(offset, offset + size, entsize):
        name, info, _, _, _, nbytes = _SYMBOL.unpack_from(data, at)
        if info & 0xF == _STT_TLS and bytes(data[strings + name : strings + name + len(prefix)]) == prefix:
            total += nbytes
    return total
