"""AdmissionReview handling. Only app.py (the transport) knows about Flask."""
