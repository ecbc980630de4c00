"""The paper data pipelines and table drivers (``python -m scripts.pipelines.table ...``)."""
