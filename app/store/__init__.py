"""Persistence: saved plans (``plans``), the team catalog (``team``, and its resolution beside
the public catalog, ``catalog``), the rules a saved plan is stored under (``saving``) and the
Alembic migrations that own the schema."""
