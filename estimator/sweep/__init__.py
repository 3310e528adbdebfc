"""Sweeps over layouts: every candidate evaluated in bulk, the feasible ones ranked, Pareto
fronts and recommendations (``training``)."""
