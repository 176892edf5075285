"""``kd.DeviceArray`` and its NumPy-style surface, above the array engine and cuBLAS it calls:

- ``ndarray``: ``DeviceArray`` (``astype``, ``fill``, ``@``, item assignment), with the
  ``methods``, ``protocol`` and ``complex_parts`` mixins and the array engine's ``operators``
  (reached through ``array.engine``, imported on first use so that declaring a kernel stays
  cheap; cuBLAS, the kerneldsl[blas] extra, on the first ``@``); it registers itself with the
  runtime when imported, which every public ``kd`` name that makes arrays does first;
- ``creation`` (``kd.asarray``, ``kd.empty``...), ``manipulation`` (``kd.stack``, ``kd.flip``...),
  ``sessions`` (``kd.Session``), ``random`` (``kd.random``).

The engine below knows the class only through the runtime's registration (``array.arraytype``).
"""
