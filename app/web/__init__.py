"""The dashboard: planner pages (``planners``), saved-plan pages (``saved``) and the Plotly
figures they draw (``charts``); every page has its JSON twin."""
