"""Time: kernel times on an accelerator (``kernels``), collectives and the communication plan
(``comms``), one layer's forward on one rank (``layer``: its linears' GEMMs in ``gemms``,
Megatron-Core's eager ops in ``eager_ops``), and the training step (``training``)."""
