"""The array layer: ``kd.DeviceArray`` and the engine that ``kd.ops``, ``@kd.elementwise``,
``kd.reduction`` and ``@kd.fuse`` share.

- ``ndarray``: ``kd.DeviceArray``, its Python surface in one place (with the ``protocol`` and
  ``operators`` mixins); it reaches the op table and cuBLAS through ``engine``, a door the package
  root installs, so that the modules below it name the class without an import loop;

- ``ops``: ``kd.ops``, the op table (one row per elementwise op, the reductions and scans), made
  of ``elementwise``, ``reduction`` and ``scan``; ``dtype_variants`` the same in another dtype;
- ``program``: the per-element IR (leaves and operator nodes) and the builder that traces it;
- ``placement``: where a call runs (host or which session), adopting foreign arrays, ``out=`` rules;
- ``plan``: one compiled program for one argument specialization, and the bounded plan cache;
- ``kernels``: programs turned into ``kerneldsl.launch.dispatch.Kernel`` objects (parameters, cache);
- ``elementwise``, ``reduction``, ``fusion``: the three kinds of callables built on them;
- ``operators``: Python's operators as op-table rows, written once for DeviceArray and the fuse
  tracer;
- ``promotion``: NumPy 2's dtype rules, which every op and reduction follows.

Every kernel made here is an ordinary ``Kernel``: same binding, NVRTC, disk cache, adapter and
C launch path as ``@kd.kernel``.
"""
