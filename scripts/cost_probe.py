"""Thin command: see fairseq_plugins/evaluation/verification_cost.py (python -m scripts.cost_probe --help)."""
from fairseq_plugins.evaluation.verification_cost import main

if __name__ == "__main__":
    main()
