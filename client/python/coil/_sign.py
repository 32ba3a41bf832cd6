"""Signed artifacts on the Python side (cache/sign.h is the reference): trusted Ed25519 public
keys "name:base64", and the check of a signature "name:base64" over the canonical string

    "coil-artifact-v1\\nkey=KEY\\nsha256=SHA256\\ntarget=TARGET\\nabi=ABI\\n"

through OpenSSL's libcrypto (ctypes; the library coil itself links)."""
import base64
import binascii
import ctypes
import ctypes.util
import os
import re
import threading

from ._errors import CoilError

ABI_VERSION = 1
_NID_ED25519 = 1087
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_crypto = None
_lock = threading.Lock()


def _lib():
    global _crypto
    with _lock:
        if _crypto is None:
            lib = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so.3")
            lib.EVP_PKEY_new_raw_public_key.restype = ctypes.c_void_p
            lib.EVP_PKEY_new_raw_public_key.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                                                        ctypes.c_size_t]
            lib.EVP_PKEY_free.argtypes = [ctypes.c_void_p]
            lib.EVP_MD_CTX_new.restype = ctypes.c_void_p
            lib.EVP_MD_CTX_free.argtypes = [ctypes.c_void_p]
            lib.EVP_DigestVerifyInit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.c_void_p, ctypes.c_void_p]
            lib.EVP_DigestVerify.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.c_char_p, ctypes.c_size_t]
            _crypto = lib
    return _crypto


def _split(s, want):
    """"name:base64" -> (name, bytes of length want), or None."""
    name, sep, b64 = s.partition(":")
    if not sep or not _NAME.match(name):
        return None
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None
    return (name, raw) if len(raw) == want else None


def parse_keys(text, source):
    """{name: 32-byte public key} of a list separated by whitespace ('#' comments)."""
    keys = {}
    for line in text.splitlines():
        for word in line.split("#", 1)[0].split():
            k = _split(word, 32)
            if k is None:
                # never quoted past its name: it could be a secret key given by mistake
                raise CoilError("%s: the key named %r (%d characters) is not a public key "
                                "'name:base64' of 32 bytes" % (source, word.split(":", 1)[0][:64], len(word)),
                                stage="load")
            if k[0] in keys:
                raise CoilError("%s: two trusted keys are named %r" % (source, k[0]), stage="load")
            keys[k[0]] = k[1]
    return keys


def trusted_keys(keys=None):
    """The trusted keys: `keys` (a list of "name:base64") when given, else $COIL_TRUSTED_KEYS and
    $COIL_TRUSTED_KEYS_FILE; {} when none is configured (signatures are then not checked)."""
    if keys is not None:
        return parse_keys("\n".join(keys), "trusted keys")
    out = parse_keys(os.environ.get("COIL_TRUSTED_KEYS", ""), "COIL_TRUSTED_KEYS")
    path = os.environ.get("COIL_TRUSTED_KEYS_FILE")
    if path:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise CoilError("trusted keys file %s: %s" % (path, e.strerror), stage="load") from None
        for name, raw in parse_keys(text, "trusted keys file " + path).items():
            if name in out:
                raise CoilError("two trusted keys are named %r" % name, stage="load")
            out[name] = raw
    return out


def message(key, sha256, target, abi=ABI_VERSION):
    return ("coil-artifact-v1\nkey=%s\nsha256=%s\ntarget=%s\nabi=%d\n"
            % (key, sha256, target, abi)).encode()


def verify(trusted, key, sha256, target, sig):
    """Raises CoilError (stage "load") unless a key in `trusted` signed key/sha256/target for
    this ABI version: the reasons as cache/sign.c's trust_verify gives them."""
    if not sig:
        raise CoilError("artifact %s is unsigned, and trusted keys are configured; refusing it" % key,
                        stage="load")
    s = _split(sig, 64)
    if s is None:
        raise CoilError("artifact %s: malformed signature (not 'name:base64' of 64 bytes); refusing it"
                        % key, stage="load")
    name, raw = s
    pub = trusted.get(name)
    if pub is None:
        raise CoilError("artifact %s is signed by key '%s', which is not trusted (trusted: %s); "
                        "refusing it" % (key, name, ", ".join("'%s'" % n for n in trusted)),
                        stage="load")
    lib = _lib()
    msg = message(key, sha256, target)
    pk = lib.EVP_PKEY_new_raw_public_key(_NID_ED25519, None, pub, len(pub))
    ctx = lib.EVP_MD_CTX_new()
    try:
        ok = (pk and ctx and lib.EVP_DigestVerifyInit(ctx, None, None, None, pk) == 1
              and lib.EVP_DigestVerify(ctx, raw, len(raw), msg, len(msg)) == 1)
    finally:
        lib.EVP_MD_CTX_free(ctx)
        lib.EVP_PKEY_free(pk)
    if not ok:
        raise CoilError("artifact %s: bad signature by key '%s' (not made for this key, sha256 %s..., "
                        "target %s and ABI %d: tampered or substituted); refusing it"
                        % (key, name, sha256[:12], target, ABI_VERSION), stage="load")
