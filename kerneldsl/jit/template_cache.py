"""Templates compiled once, not in every process: Jinja's compiled code for each template, kept
beside the templates (``template_options.COMPILED_DIR``) the way Python keeps a module's bytecode.

A built package carries it from the build (``setup.py``); a checkout writes it on its first render
where it may. Every load compares the checksum of the template's current source and of the
environment's settings that shape compiled code with those it was compiled from (Jinja's bucket
check), and the file is named for the template, the Jinja release and the interpreter: an edited
template, other settings, another Jinja or another Python compiles from source again, never from
stale code. The code is trusted as the package's own files are (as Python trusts the bytecode
beside its modules): it lives with the templates, never in the shared disk cache. Imports only
Jinja and the standard library, so the package build can load it by path (``setup.py`` cannot
import kerneldsl)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
from typing import BinaryIO

import jinja2
from jinja2.bccache import Bucket


class TemplateCodeCache(jinja2.FileSystemBytecodeCache):
    """Jinja's file bytecode cache, keyed without the template's path (a build's templates are
    installed elsewhere), and silent where a file cannot be read or written (a read-only install
    then parses its templates, as Python compiles modules whose bytecode it cannot save)."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, f"%s.{sys.implementation.cache_tag}.jinja")

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha256(f"{name}|jinja2 {jinja2.__version__}".encode()).hexdigest()[:32]

    def get_bucket(self, environment: jinja2.Environment, name: str, filename: str | None, source: str) -> Bucket:
        """Jinja's bucket, whose checksum covers the settings too (``_settings``)."""
        return super().get_bucket(environment, name, filename, f"{source}\0{_settings(environment)}")

    def load_bytecode(self, bucket: Bucket) -> None:
        """A file that cannot be read, is not whole, is not a regular file, or that another user
        could have written is a miss (the template is compiled)."""
        try:
            with _open_owned(self._get_cache_filename(bucket)) as f:
                bucket.load_bytecode(f)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        with contextlib.suppress(OSError):
            os.makedirs(self.directory, exist_ok=True)
            super().dump_bytecode(bucket)


def _open_owned(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file that, like its directory, belongs to
    this user (or root) and no one else may write; OSError otherwise. Code is executed when
    loaded, so a file others could have planted is never read (as the disk cache refuses such
    entries). Opened without blocking and checked on the open descriptor: a FIFO there would
    otherwise hold the first render forever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise OSError(f"{path} is not a regular file")
        if not all(_private(st) for st in (opened, os.stat(os.path.dirname(path)))):
            raise OSError(f"{path} or its directory may be written by another user")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _private(st: os.stat_result) -> bool:
    return st.st_uid in (os.getuid(), 0) and not st.st_mode & 0o022


# what the lexer and code generator read from an environment (the rest is read as templates render)
_COMPILE_SETTINGS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
    "optimized",
    "autoescape",
)


def _settings(environment: jinja2.Environment) -> str:
    values = [getattr(environment, name) for name in _COMPILE_SETTINGS]
    return repr((values, sorted(environment.extensions), environment.finalize is not None))


def compile_all(environment: jinja2.Environment) -> list[str]:
    """Compile every template ``environment`` loads into its code cache (the package build's
    step); the names compiled."""
    names = environment.list_templates(extensions=["j2"])
    for name in names:
        environment.get_template(name)
    return names
