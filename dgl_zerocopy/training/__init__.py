"""Training: the loop and what it is made of.

- :mod:`.train`: the training loop; :mod:`.sources`: the feature sources it compares;
  :mod:`.hetero_sources`: those that serve heterographs.
- :mod:`.config`: the run configuration (YAML and command line); :mod:`.models`: GraphSAGE, GCN, RGCN.
- :mod:`.host_budget`: whether a host buffer of features left on storage serves the run's batches.
- :mod:`.ddp`: one process per GPU (:mod:`.shared_dataset`: a dataset sent to them without copies);
  :mod:`.info`: the environment report of ``dgl-zerocopy info``.

The command line (:mod:`dgl_zerocopy.cli`) sits above this layer and :mod:`dgl_zerocopy.dist`.
"""
