"""Device programs for non-Tenstorrent hardware: the Triton/CUDA and NKI ports and their drivers."""
