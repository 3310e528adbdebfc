"""Time: kernel times on an accelerator (``kernels``), collectives and the communication plan
(``comms``), and the training step (``training``)."""
