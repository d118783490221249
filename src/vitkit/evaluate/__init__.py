"""Evaluation: metrics, frozen-feature transfer (few-shot, k-NN, linear probe), inspection, provenance."""
