"""The lab: what evaluates, prepares, analyses and plots around the plugin, and what travels to an
air-gapped GPU machine.  ``--user-dir fairseq_plugins`` loads the plugin only; the lab imports the
plugin, never the reverse (tests/test_layout.py checks it).

- :mod:`.evaluation`: checkpoints decoded in-process, corpora read back with BLEU, the benchmark
  (rows, harness, results, ``--jobs``) and its runners, reference models, learning curves, profiles and timing;
- :mod:`.offline`: the offline bundle, the limits of what travels, the evidence parts (docs/GPU.md);
- :mod:`.training`: reference runs trained to convergence, their curves, and models/ packed;
- :mod:`.corpora`: corpus preparation: the corpus builders, distillation and the paper pipelines;
- :mod:`.analysis`: diagnostics of trained models (order errors, slot accuracy, BLEU gaps);
- :mod:`.viz`: DDGviz, the speed-vs-BLEU figure and learning curves.

The commands in scripts/ are thin over the plugin and the lab.
"""
import fairseq_plugins  # noqa: F401  (first: the plugin repairs fairseq before a lab module imports it)
