"""Running what ``kerneldsl.jit`` built, one home for "launch":

- ``dispatch``: ``@kd.kernel`` and the ``Kernel`` object (a call's lookup, its miss path);
- ``bound``: a Build bound to a session (module, function, parameter buffer, adapter), and the
  numpy path's copy-in, launch, copy-back;
- ``fastpath``: the C launch path's Python side (launch tables, entry slots) over
  ``kerneldsl/_fastlaunch.c``;
- ``resources``: a build's function attributes and a launch's occupancy;
- ``routing``: calls whose arguments live on a remote worker, recognised at the entry points.

The session's side of a launch (streams, the driver call) is ``kerneldsl.runtime``'s.
"""
