"""Scene synthesis: seeded scene plans (pure data) and the backends that render them.

- ``assets``: the asset file (objects and floors for both backends, with each asset's source and licence);
  ``models`` / ``models_household`` (built from ``shapes``) / ``floors``: procedural meshes and floor textures of
  the built-in assets.
- ``plan``: :func:`~commonlink.synth.plan.plan_scene`, one seeded plan per (seed, scene index).
- ``render``: the :class:`~commonlink.synth.render.Renderer` interface, and :data:`~commonlink.synth.render.RENDERERS`
  (``--backend`` name -> the renderer's own settings, which open it); ``render.offline``: the embedded CPU renderer
  (pyrender on EGL) with exact instance masks; ``render.unrealcv``: the same plans on a running Unreal Engine
  (its session with the plugin, through the ``unrealcv`` client, is ``render.unrealcv_transport``);
  ``render.unreal_check``: the preflight of ``commonlink unreal check`` (the test server modelled on the plugin is
  ``tests.fixtures.unrealcv_server``; the Unreal Editor script is ``tools/unreal/commonlink_import.py``).
- ``visibility``: which objects an image shows, from its instance mask.
- ``job``: :class:`~commonlink.synth.job.SynthJob`, what a synthetic catalog is made from (scenes, seed, asset
  file, and the plan's, the scene checks' and the renderer's settings), and the record of it a folder keeps;
  ``scenes``: one scene planned, rendered and written atomically, and ``catalog.jsonl`` rebuilt from the finished
  scene folders; ``runner``: :func:`~commonlink.synth.runner.synthesize`, the resumable scene loop behind
  ``commonlink synth`` (shards, worker processes, Ray). Contact sheets of samples are
  ``commonlink.kinds.common_o.figures.contact_sheet``.

Heavy dependencies (pyrender, OpenGL, trimesh, unrealcv, ray) are imported only by the functions that need them.
"""
