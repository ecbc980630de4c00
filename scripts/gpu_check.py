"""Thin command: see scripts/lab/evaluation/gpu_check.py (python -m scripts.gpu_check --help)."""
from scripts.lab.evaluation.gpu_check import main

if __name__ == "__main__":
    main()
