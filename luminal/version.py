"""luminal's version: one place, read by the package root and by the compile cache's keys
(a module of its own, so that the cache need not import the package it is part of)."""

__version__ = "0.1.0"
