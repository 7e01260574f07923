"""Credential files (F-HAR-3): listed when a workspace is browsed, never read through browsing.

A path is sensitive when any of its components is a credential name (so ``.env/prod`` and
``keys/server.pem`` both are), compared case-insensitively (``.ENV`` and ``SERVER.KEY`` are the
same files on a case-insensitive file system, and the same secrets anywhere):

* ``.env`` and ``.env*`` (``.env.local``, ``.env.production``, ``.envrc``)
* private keys and key stores: ``*.pem``, ``*.key``, ``*.p12``, ``*.pfx``, ``*.jks``,
  ``*.keystore``, ``*.kdbx``, and ``id_rsa``, ``id_dsa``, ``id_ecdsa``, ``id_ed25519`` with any
  suffix but ``.pub`` (a public key is not a secret)
* credential stores of common tools: ``.netrc``, ``_netrc``, ``.npmrc``, ``.pypirc``,
  ``.pgpass``, ``.git-credentials``, ``.htpasswd``, ``credentials`` and ``credentials.json``
  (AWS's, Google's client secrets and others), Terraform's ``*.tfvars`` and ``*.tfstate``
* directories that hold them, so everything under one is: ``.ssh``, ``.aws``, ``.gnupg``,
  ``.docker``, ``.kube`` (a home directory's, copied or linked into a workspace)

(The agent's own ``read_file`` is not limited by this: it works in the workspace it was given.)
"""

from __future__ import annotations

SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".tfvars", ".tfstate")
NAMES = frozenset({".netrc", "_netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", ".htpasswd",
                   "credentials", "credentials.json",
                   ".ssh", ".aws", ".gnupg", ".docker", ".kube"})  # (directories: every path under one)
KEY_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")


def sensitive_name(name: str) -> bool:
    """Whether one file name is a credential file's."""
    low = name.lower()
    if low.startswith(".env") or low in NAMES or low.endswith(SUFFIXES):
        return True
    return low.startswith(KEY_PREFIXES) and not low.endswith(".pub")


def sensitive_path(path: str) -> bool:
    """Whether a workspace-relative path has a credential name among its components."""
    return any(sensitive_name(c) for c in path.split("/") if c not in ("", ".", ".."))


def hidden_path(path: str) -> bool:
    """Whether a workspace-relative path goes through a ``.git`` entry (never browsed: its
    config may hold credentials in remote URLs; any case, as for credential names)."""
    return any(c.lower() == ".git" for c in path.split("/"))
