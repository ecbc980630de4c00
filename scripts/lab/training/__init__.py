"""Reference runs (``python -m scripts.reference_run``): the models of a list trained side by side until
each has converged, with their learning curves, and packed into models/.

Modules: :mod:`.model_list` (the list's lines and a config's fairseq-train words), :mod:`.train_command`
(a model's fairseq-train command), :mod:`.checkpoints` (interval checkpoints, resuming, export),
:mod:`.frozen_roles` (``--freeze``), :mod:`.curve_scoring` (one model's curve scored point by point),
:mod:`.orchestration` (the trainings, the scorer and the convergence watch), :mod:`.packing` (a model
offered to ``--models-dir``), :mod:`.summary` (OUT/summary.json) and :mod:`.run` (the command's body).
"""
