"""A project's workspace written with a ``~`` (``POST /projects``): only a ``~`` that begins the
path as written is a home directory (runtime/workspaces.py)."""

from __future__ import annotations

import os
import pwd

import pytest

from runtime.workspaces import WorkspaceInvalid, workspace_dir


def test_a_user_tilde_after_dot_slash_is_a_relative_path_not_that_users_home() -> None:
    # `./~root/p` was `/root/p` (pathlib drops the `./`, then expands `~root`): an absolute path in
    # another directory than the one written, taken for the project's workspace.
    raw = f"./~{pwd.getpwuid(os.getuid()).pw_name}"
    with pytest.raises(WorkspaceInvalid) as info:
        workspace_dir(raw)
    assert (info.value.code, info.value.message) == (
        "WORKSPACE_INVALID", f"workspace {raw!r} must be an absolute path")


def test_a_tilde_of_a_user_with_no_home_is_named() -> None:
    with pytest.raises(WorkspaceInvalid) as info:
        workspace_dir("~nosuchuser-lens-test/p")
    assert (info.value.code, info.value.message) == (
        "WORKSPACE_INVALID", "workspace '~nosuchuser-lens-test/p': there is no home directory of user "
                             "'nosuchuser-lens-test'")
