"""Unit tests: pure functions and objects, no API server, no process of gangkeeper's."""
