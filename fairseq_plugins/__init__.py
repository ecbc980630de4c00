"""fairseq plugin for fast NMT decoding: ``--user-dir fairseq_plugins``.

Importing the package repairs fairseq-fixed for torch 2.13 / numpy 2 (``compat``), prints the
plugin's own errors as one line at the top level of a command (``errors``) and registers the task,
models, criterions and generators with fairseq's registries.
"""
from fairseq_plugins import compat, errors

compat.apply()
errors.install_excepthook()

from fairseq_plugins import tasks, models, criterions  # noqa: E402,F401  (registration side effects)
