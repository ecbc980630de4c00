"""Visualisations (DDGviz, Santilli et al. 2023 §3.5)."""
