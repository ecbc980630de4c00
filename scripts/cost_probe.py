"""Thin command: see scripts/lab/evaluation/verification_cost.py (python -m scripts.cost_probe --help)."""
from scripts.lab.evaluation.verification_cost import main

if __name__ == "__main__":
    main()
