"""Making ``kd.DeviceArray``s (the class is ``kerneldsl.array.ndarray``), above the array engine
and cuBLAS:

- ``creation`` (``kd.asarray``, ``kd.empty``...), ``manipulation`` (``kd.stack``, ``kd.flip``...),
  ``sessions`` (``kd.Session``), ``random`` (``kd.random``).
"""
