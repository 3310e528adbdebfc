"""Exact counts: parameters (``params``), FLOPs (``flops``), the module tree (``tree``) and the
per-layer table (``layers``)."""
