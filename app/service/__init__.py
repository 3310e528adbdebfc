"""The service around the routes: request guards and limits (``guards``), refusals as one JSON
shape (``errors``), security headers, metrics and the access log (``operations``), where CPU
work runs (``lanes``) and work that must be killable (``isolated``, ``exact``)."""
