"""`kvplan diagnose`: read a vLLM (or SGLang) server's /metrics and name what is wrong.

scrape.py reads URLs, files and stdin; metrics.py turns Prometheus text into per-engine
snapshots under one set of names; window.py derives levels, rates and histogram deltas over a
sequence of scrapes; findings.py applies the rules (docs/diagnose.md); crosscheck.py compares
the pool with `kvplan size`; render.py prints the report.
"""
