"""gangkeeper: all-or-nothing scheduling for Kubernetes workloads, without rewriting manifests."""

__version__ = "0.1.0"
