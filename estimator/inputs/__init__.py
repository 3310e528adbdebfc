"""What is planned, as frozen specs: the model (read from a ``config.json`` by its family's
reader), the accelerator and the precision by role."""
