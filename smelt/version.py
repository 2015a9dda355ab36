"""smelt's version: artifacts and the cache record and check it (a leaf any layer
may import; the package face re-exports it)."""

__version__ = "0.1.0"
