"""Against the fake API server (tests/apiserver.py) or gangkeeper's own processes: no cluster."""
