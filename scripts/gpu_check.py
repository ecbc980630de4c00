"""Thin command: see fairseq_plugins/evaluation/gpu_check.py (python -m scripts.gpu_check --help)."""
from fairseq_plugins.evaluation.gpu_check import main

if __name__ == "__main__":
    main()
