"""Serving: time to first token, time per output token, throughput and cost of a replica
(``estimate``: a lone request and the concurrency curve in ``curve``, the steady state under
load in ``load`` and ``steady``, latency targets and the fleet a rate needs in ``targets``)."""
