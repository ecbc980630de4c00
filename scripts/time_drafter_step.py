"""Thin command: see scripts/lab/evaluation/drafter_cost.py (python -m scripts.time_drafter_step --help)."""
from scripts.lab.evaluation.drafter_cost import main

if __name__ == "__main__":
    main()
