"""``kd.DeviceArray`` and its NumPy-style surface, above the array engine and cuBLAS it calls:

- ``ndarray``: ``DeviceArray``, its Python surface in one place (``astype``, ``fill``, ``@``,
  item assignment, NumPy's reduction methods, complex parts), with the ``protocol`` mixin and the
  array engine's ``operators``; it reaches the op table and cuBLAS (the kerneldsl[blas] extra)
  through ``array.engine``, the door the package root installs, opened on first use so that
  declaring a kernel stays cheap; it registers itself with the runtime when imported, which every
  public ``kd`` name that makes arrays does first;
- ``creation`` (``kd.asarray``, ``kd.empty``...), ``manipulation`` (``kd.stack``, ``kd.flip``...),
  ``sessions`` (``kd.Session``), ``random`` (``kd.random``).

The engine below knows the class only through the runtime's registration (``array.arraytype``).
"""
