"""What the scripts share to evaluate trained models: a checkpoint loaded and decoded the way
``fairseq-generate`` does it (:mod:`.generation`), a corpus folder's references and BLEU
(:mod:`.corpus`), fairseq-train's JSON logs read back (:mod:`.train_log`), learning curves and
their convergence rule (:mod:`.learning_curve`) and background jobs in their own process groups
(:mod:`.jobs`); the benchmark of ``scripts/benchmark.py`` (``bench_*.py``: rows, harness, results, ``--jobs``
processes, the run).

Not imported by ``--user-dir fairseq_plugins``: only the scripts and the tests use it (the check of a
shipped checkpoint when fairseq loads it is the plugin's own: ``fairseq_plugins/shipped.py``).
"""


class EvaluationError(RuntimeError):
    """Bad input to an evaluation (a missing checkpoint, an empty split...); the message says how to fix it."""
