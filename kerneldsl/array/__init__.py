"""The array core: what ``kd.ops``, ``@kd.elementwise``, ``kd.reduction`` and ``@kd.fuse`` share.

- ``ndarray``: ``DeviceArray``, the user-facing array (``astype``, ``fill``, ``@``, the
  ``operators``, ``methods``, ``protocol`` and ``complex_parts`` mixins), at the top of this
  layer: it calls the engine below and cuBLAS through one door (``engine``, which imports them
  on first use), and they know it only through the runtime's registration (``arraytype``); it
  registers itself when imported, which every public ``kd`` name that makes arrays does first;
- ``ops``: ``kd.ops``, the op table (one row per elementwise op, the reductions and scans), made
  of ``elementwise``, ``reduction`` and ``scan``; ``dtype_variants`` the same in another dtype;
- ``creation``: ``kd.asarray``, ``kd.empty`` and the other NumPy-style constructors;
- ``program``: the per-element IR (leaves and operator nodes) and the builder that traces it;
- ``placement``: where a call runs (host or which session), adopting foreign arrays, ``out=`` rules;
- ``plan``: one compiled program for one argument specialization, and the bounded plan cache;
- ``kernels``: programs turned into ``kerneldsl.launch.dispatch.Kernel`` objects (parameters, cache);
- ``elementwise``, ``reduction``, ``fusion``: the three kinds of callables built on them.

Every kernel made here is an ordinary ``Kernel``: same binding, NVRTC, disk cache, adapter and
C launch path as ``@kd.kernel``.
"""
