"""LLM Planner's web service and CLI over the ``estimator`` core."""
