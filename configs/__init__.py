"""The shipped training configs (``*.yaml``, the keys of ``dgl-zerocopy train``'s flags), as package data.

The repository's ``configs/`` is installed as this package (pyproject.toml's package-dir), so a wheel carries
them; ``dgl-zerocopy train --config NAME`` finds one by name (:func:`dgl_zerocopy.training.config.resolve_config`).
"""
