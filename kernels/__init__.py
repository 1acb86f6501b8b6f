"""Triton kernels over tensor-parallel vocab shards, installed as ``dnmopd.kernels``."""
