"""The real tier: a real control plane built from upstream modules (tests/realcluster/), `-m cluster`."""
