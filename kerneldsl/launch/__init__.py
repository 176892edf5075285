"""Running what ``kerneldsl.jit`` built, one home for "launch":

- ``dispatch``: ``@kd.kernel`` and the ``Kernel`` object (a call's lookup, its miss path);
- ``bound``: a Build bound to a session (module, function, parameter buffer, adapter), and the
  numpy path's copy-in, launch, copy-back;
- ``warm``: the one warm path of kernels, ops, reductions, scans, fused functions and gemm
  (the call key, the entries plans return, the bounded table; where C launches are kept);
- ``fastpath``: the C launch path's Python side (launch tables, the front class calls enter
  through) over ``kerneldsl/_fastlaunch.c``;
- ``resources``: a build's function attributes and a launch's occupancy;
- ``routing``: calls whose arguments live on a remote worker, recognised at the entry points.

The session's side of a launch (streams, the driver call) is ``kerneldsl.runtime``'s.
"""
