"""Store backends: the state directory (default) and, as an extra, PostgreSQL."""

from __future__ import annotations

from .directory import DirectoryStore as DirectoryStore
