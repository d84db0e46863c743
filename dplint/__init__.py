"""dplint: find and fix DataParallel / DistributedDataParallel misuses in training scripts.

Importing this package is cheap on purpose: it loads neither LibCST nor torch.
"""

__version__ = "0.1.0"
