"""A module whose import raises (not an ImportError): the params preflight names the process."""

raise RuntimeError("no venue credentials at import")
