"""Memory per GPU: training (``training``, with the saved activations of ``activations``),
serving (``inference``: weights and KV cache), and both over time (``timeline``)."""
