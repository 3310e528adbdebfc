"""The parallel layout: its sizes and the rules frameworks enforce (``parallel``), where each
parameter and pipeline stage lands (``sharding``), and which ranks form each group (``ranks``)."""
