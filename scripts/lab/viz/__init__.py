"""Visualisations: DDGviz (Santilli et al. 2023 §3.5) and the benchmark's speed-vs-BLEU figure."""
