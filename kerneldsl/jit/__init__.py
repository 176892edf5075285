"""The compile pipeline, declaration to image, one module per stage:

- ``signature/``: a kernel's declaration parsed (parameters, dtype variables, shape symbols);
- ``specialize``: one call's arguments bound to it (dtypes, extents, constants, alignment);
- ``launch_contract``: the launch contract the generated code and both launch paths share;
- ``codegen`` (with ``template_cache`` and ``template_options``, the templates' loader):
  what is generated, decided in Python and rendered from ``templates/``; ``headers`` and
  ``device_code`` what it includes;
- ``compiler`` (NVRTC) and ``host_compile`` (the CPU device's C++, which ``host_split`` splits at
  its barriers and warp collectives, reading the body with ``body_statements``), ``target`` the
  arch, ``diagnostics`` their errors mapped back to the kernel body;
- ``build``: one specialization built, through the disk cache (``kerneldsl.cache``).

It imports the runtime below it and nothing above: ``kerneldsl.launch`` runs its builds.
"""
