"""The workspace file tools (SPEC §5, F-EXE-2..6 and F-EXE-9) as a synchronous library.

The executor process (:mod:`tools.executor.server`) serves these over gRPC; nothing here knows
about gRPC, trio or the event log. Modules, one concept each:

    errors     FileToolError (stable codes) and LIMITS
    confine    path resolution confined to the root (dir fds, O_NOFOLLOW, symlink walking)
    read       read_file paging of files and directory listings
    edit       edit_file arguments and the in-memory string replacements
    patch      patch_file grammar, matching and line-ending rules
    image      view_image magic-byte sniffing
    commit     atomic publish (temp file, fsync, rename / link, fsync dir)
    journal    call replay: one record per call id, blobs by hash
    workspace  the facade: Workspace and EditOutcome
"""

from .errors import LIMITS, FileToolError
from .workspace import EditOutcome, Workspace

__all__ = ["LIMITS", "EditOutcome", "FileToolError", "Workspace"]
