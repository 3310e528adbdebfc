"""Serving: time to first token, time per output token, throughput and cost of a replica
(``estimate``)."""
