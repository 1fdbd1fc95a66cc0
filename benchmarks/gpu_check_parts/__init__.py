"""Parts of ``benchmarks/gpu_check.py``: pure comparisons (``compare``), the report writer (``report``),
the checks themselves (``checks``) and the scripts its child processes run (``children/``)."""
