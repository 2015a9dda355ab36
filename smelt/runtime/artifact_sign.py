"""Ed25519 signatures of artifacts: whose native code an artifact holds.

A signed artifact holds `signature.json`: the algorithm, the signer's raw public key
and the signature of the manifest's exact bytes (prefixed by `DOMAIN`). The manifest
records the size and sha256 of every other member, and loading checks each of them
against it, so the signature covers the whole artifact. Keys are the usual PEM files:

    openssl genpkey -algorithm ed25519 -out key.pem      # sign with it (private)
    openssl pkey -in key.pem -pubout -out key.pub        # trust it (public)

`cryptography` is imported only when a signature is made or checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any

from smelt.errors import InvalidModel, SmeltError
from smelt.runtime.files import open_regular

SIGNATURE = "signature.json"
DOMAIN = b"smelt-artifact-signature-1\0"
"""Prefixed to the signed manifest: a signature made for anything else never
verifies as an artifact's."""
SIGNATURE_LIMIT = 4096  # bytes of signature.json: a real one holds about 200
TRUST_HELP = (
    "an artifact is native code that runs in this process: load it with "
    "trust=True (smelt run --trust) if you trust where it came from, or sign it "
    "(smelt compile --sign KEY.pem) and name the public key (trust='KEY.pub', "
    "smelt run --trust-key KEY.pub)"
)


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SmeltError(
            "signed artifacts need the cryptography package: pip install cryptography"
        ) from None
    return ed25519, serialization, InvalidSignature


def fingerprint(raw_public_key: bytes) -> str:
    """A short name of a public key: ed25519:<first 16 hex digits of its sha256>."""
    return "ed25519:" + hashlib.sha256(raw_public_key).hexdigest()[:16]


def _read_key_file(path: str, what: str) -> bytes:
    try:
        with open_regular(path, what) as f:
            data = f.read(65537)
    except OSError as e:
        raise SmeltError(f"cannot read the {what} '{path}': {e}") from None
    if len(data) > 65536:
        raise SmeltError(f"the {what} '{path}' is too large to be a key")
    return data


def private_key(key: Any):
    """An Ed25519 private key: itself, or read from a PEM file (its path)."""
    ed25519, serialization, _ = _crypto()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    return _pem_key(
        os.fspath(key), "signing key", "an unencrypted PEM private key",
        lambda data: serialization.load_pem_private_key(data, password=None),
        ed25519.Ed25519PrivateKey,
        "openssl genpkey -algorithm ed25519 -out key.pem",
    )  # fmt: skip


def _pem_key(path: str, what: str, form: str, load, kind: type, make: str):
    """The key of `kind` in the PEM file at `path`, read by `load`; the errors
    say how to `make` one."""
    try:
        key = load(_read_key_file(path, what))
    except (ValueError, TypeError) as e:
        raise SmeltError(
            f"the {what} '{path}' is not {form} ({e}); make one with: {make}"
        ) from None
    if not isinstance(key, kind):
        raise SmeltError(f"the {what} '{path}' is not an Ed25519 key")
    return key


def public_keys(trust: Any) -> list[bytes]:
    """The raw public keys named by `trust`: a key, a PEM file (path) of one, or a
    list of them."""
    ed25519, serialization, _ = _crypto()
    items = trust if isinstance(trust, list | tuple) else [trust]
    keys = []
    for item in items:
        if isinstance(item, ed25519.Ed25519PublicKey):
            key = item
        elif isinstance(item, ed25519.Ed25519PrivateKey):
            key = item.public_key()
        elif isinstance(item, str | os.PathLike):
            key = _pem_key(
                os.fspath(item), "public key", "a PEM public key",
                serialization.load_pem_public_key, ed25519.Ed25519PublicKey,
                "openssl pkey -in key.pem -pubout -out key.pub",
            )  # fmt: skip
        else:
            raise SmeltError(
                "trust= takes True, a public key file (or Ed25519PublicKey) or a "
                f"list of them, not {type(item).__name__}"
            )
        keys.append(_raw(key, serialization))
    return keys


def _raw(key, serialization) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign(manifest: bytes, key: Any) -> bytes:
    """The `SIGNATURE` member that signs `manifest` (its exact bytes) with `key`."""
    _, serialization, _ = _crypto()
    key = private_key(key)
    record = {
        "algorithm": "ed25519",
        "key": base64.b64encode(_raw(key.public_key(), serialization)).decode(),
        "signature": base64.b64encode(key.sign(DOMAIN + manifest)).decode(),
    }
    return json.dumps(record, indent=1).encode()


def check(manifest: bytes, signature: bytes | None, trust: Any, path: str) -> str:
    """Who signed the artifact at `path` ("unsigned" or the key's fingerprint),
    once `trust` allows it: True takes any artifact whose signature, if it has
    one, verifies; keys (`public_keys`) take only one a key of theirs signed;
    None / False takes none. Refusals are InvalidModel and say what to do."""
    if signature is None:
        if trust is True:
            return "unsigned"
        raise InvalidModel(f"the artifact '{path}' is unsigned; {TRUST_HELP}")
    ed25519, _, invalid = _crypto()
    try:
        record = json.loads(signature)
        if record.get("algorithm") != "ed25519":
            raise ValueError(f"algorithm {record.get('algorithm')!r}")
        raw = base64.b64decode(record["key"], validate=True)
        sig = base64.b64decode(record["signature"], validate=True)
        ed25519.Ed25519PublicKey.from_public_bytes(raw).verify(sig, DOMAIN + manifest)
    except invalid:
        raise InvalidModel(
            f"the artifact '{path}' has a signature that does not match its "
            "manifest: it was changed after it was signed; compile it again"
        ) from None
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise InvalidModel(
            f"the artifact '{path}' has an unreadable {SIGNATURE} ({e}); compile "
            "it again"
        ) from None
    signer = fingerprint(raw)
    if trust is True or (trust not in (None, False) and raw in public_keys(trust)):
        return signer
    named = "not a key you trust" if trust not in (None, False) else "no key named"
    raise InvalidModel(
        f"the artifact '{path}' is signed by {signer} ({named}); {TRUST_HELP}"
    )
