"""The compile driver and its artifact cache: one call from an IR graph to something that runs.

    compile_graph(fn, target="cpu") = verify -> compile cache (key -> artifact) -> pass pipeline for the target
                                      -> the target's executable (neuroncc.executors)

- ``compile``: :func:`compile_graph`, the API boundary where the environment is read (cache directory, dumps).
- ``cache`` / ``cache_key``: the compile cache (memory, local disk with per-key locks and atomic publish,
  remote) and its explained key.
- ``remote`` / ``bundle`` / ``notices``: the remote tier (a Redis server shared by many machines) and its
  signed artifact values; the warning every tier gives.
- ``portable``: entries exported and imported as signed bundles for ``torch.compiler.save_cache_artifacts()`` /
  ``load_cache_artifacts()`` (the torch side is ``frontend.cache_artifacts``).
- ``records``: :class:`CompileRecord`, what one compile did (cache hit or miss and why, time per pass and for
  code generation), logged as one line on the ``neuroncc.driver`` logger; ``log_settings``: ``NEURONCC_LOG``,
  those lines on stderr (apart, so that a graph cache hit, which makes no record, does not import the records).
- ``compile_request``: what a compile through the cache takes and gives (request, result, outcome, a new
  artifact's descriptive fields), apart so that a graph cache hit, which reads entries only, does not import it.
- ``artifact``: the artifact directory format (manifest, graph text, constants, the target's own files); no
  pickle anywhere.

Import the modules themselves (``from neuroncc.driver.compile import compile_graph``): this package imports
none of them, so that loading an artifact (``cache``, ``artifact``) does not import the pass pipeline that
``compile`` runs.

May import: errors, hardware, ir, passes, codegen, executors. Imported by: frontend, device, cli.
"""
