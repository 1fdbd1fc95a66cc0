"""torchpar-top: top for PyTorch parallelism (cores, threads, launch queues, device overlap), live."""

__version__ = "0.1.0"
