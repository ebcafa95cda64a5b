"""Sphinx configuration of the API reference: ``make docs`` builds it into build/docs/ (warnings are errors).

The pages are the .rst files here (index.rst, reference/); the guides beside them stay Markdown, read as they
are on the repository's site, and are not part of this build. Each reference page renders the docstrings
(autodoc, with napoleon for the Args / Returns / Raises sections), importing the checkout's package.
"""

import importlib
import os
import sys
import warnings

# Importing the package imports torch, whose own modules warn about their own deprecations: not ours to fix here.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\..*")

# The checkout's package, also when Sphinx runs from an environment where it is not installed editable.
sys.path.insert(0, os.path.abspath(".."))

project = "dgl-zerocopy"
author = "dgl-zerocopy authors"
copyright = "dgl-zerocopy authors"
version = release = importlib.import_module("dgl_zerocopy").__version__

# cli_help (docs/_ext/cli_help.py): the ``cli-help`` directive, each command's --help as the parser prints it.
sys.path.insert(0, os.path.abspath("_ext"))
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode", "cli_help"]

# The guides (*.md) are read on the repository, not built here; reference pages only.
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = ["_build"]
root_doc = "index"

# Every documented name carries a role; a role naming something outside this reference (torch.Tensor,
# DGL's classes) has no target to link to, and Sphinx reports unresolved roles only when nitpicky is on.
nitpicky = False
# An annotation written as a string (``from __future__ import annotations``) carries its short name only, and
# ``FeatureStore`` names ours and PyG's store alike: Sphinx links it to the first match ("ref.python").
suppress_warnings = ["ref.python"]
# A class's docstring and its __init__'s together (the arguments are documented in either); no docstring
# inherited from torch or pydantic (nn.Module's __init__ and forward would describe torch, not us), and
# pydantic's own attributes left out.
autodoc_default_options = {"members": True, "show-inheritance": True, "exclude-members": "model_config, model_fields, model_computed_fields"}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autoclass_content = "both"
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = "dgl-zerocopy API reference"
