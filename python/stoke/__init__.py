"""stoke for PyTorch scripts: a loader that keeps the accelerator fed, a monitor that
says what it waits on, and the machine's probe and recommendations (docs/python.md)."""
from ._stoke import (ArgumentError, Error, FileError, FormatError, NotFoundError,
                     OutOfMemoryError, SystemFailure, UnavailableError, __version__)
from .loader import (CenterCrop, ColorJitter, Dataset, HFlip, Loader, Normalize,
                     RandomCrop, RandomResizedCrop, Resize, ResizeShorter)
from .monitor import Monitor, probe, recommend

__all__ = ["__version__", "Dataset", "Loader", "Resize", "RandomCrop", "RandomResizedCrop", "ResizeShorter",
           "CenterCrop", "HFlip",
           "ColorJitter", "Normalize", "Monitor", "probe", "recommend", "Error",
           "ArgumentError", "FileError", "FormatError", "NotFoundError",
           "OutOfMemoryError", "SystemFailure", "UnavailableError"]
