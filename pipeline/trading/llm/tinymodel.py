"""The tiny stand-in LLM: a random-weight llama-architecture GGUF written with the ``gguf`` package.

It exists so the hub, its tests and the paper setup run the real llama.cpp code path (load, tokenize,
prompt evaluation with prefix reuse, grammar-constrained sampling) without a multi-GB download. It has no
knowledge: under the production grammar it writes well-formed but arbitrary instructions. It is named a
stand-in wherever it is used (``general.name`` below; the hub's status says ``stand-in``).

Layout (``write_tiny_gguf``):

- architecture ``llama``: ``N_LAYERS`` blocks, embedding ``N_EMBD``, ``N_HEAD`` heads, SwiGLU FFN of
  ``N_FF``; 2-D weights f16, norms f32; every weight drawn from ``numpy.random.default_rng(seed)``.
- tokenizer ``llama`` (SentencePiece-style, as llama.cpp's loader reads it): ``<unk>`` (0), ``<s>`` (1,
  BOS), ``</s>`` (2, EOS), the 256 byte tokens ``<0x00>``..``<0xFF>`` (type BYTE: the fallback for every
  byte not covered otherwise), then one NORMAL token per printable ASCII character with ``"▁"`` (U+2581)
  for the space. So every prompt tokenizes to about one token per byte. No space prefix is added.

The file is about 300 KB. ``python -m pipeline.trading.llm.tinymodel OUT_PATH [--seed N]`` writes it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

TINY_NAME = "shmpipe-tiny-stand-in"
N_LAYERS = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
CONTEXT_LENGTH = 4096
DEFAULT_SEED = 20240601

TOKEN_UNK, TOKEN_BOS, TOKEN_EOS = 0, 1, 2
_SPACE_PIECE = "\u2581"


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of the byte-level vocabulary (see the module docstring)."""
    import gguf

    T = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [T.BYTE] * 256
    chars = [_SPACE_PIECE] + [chr(c) for c in range(0x21, 0x7F)]
    tokens += chars
    types += [T.NORMAL] * len(chars)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(chars))]
    return tokens, scores, [int(t) for t in types]


def write_tiny_gguf(path: str | os.PathLike, *, seed: int = DEFAULT_SEED, chat_template: str | None = None) -> Path:
    """Write the tiny stand-in model to ``path`` (parent folders created; an existing file replaced
    atomically) and return the path. ``chat_template``: a Jinja chat template to store as
    ``tokenizer.chat_template`` (tests of the hub's template handling; the stand-in has none).

    Raises:
        ImportError: the ``gguf`` package is not installed.
        OSError: the file cannot be written.
    """
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(TINY_NAME)
    w.add_description("random-weight stand-in for tests and the paper setup; not a language model")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYERS)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(TOKEN_BOS)
    w.add_eos_token_id(TOKEN_EOS)
    w.add_unk_token_id(TOKEN_UNK)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:  # numpy (out, in) = ggml (in, out)
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    w.add_tensor("token_embd.weight", mat(n_vocab, N_EMBD, 1.0))
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(N_EMBD))
        w.add_tensor(p + "attn_q.weight", mat(N_EMBD, N_EMBD, 0.15))
        w.add_tensor(p + "attn_k.weight", mat(N_EMBD * N_HEAD_KV // N_HEAD, N_EMBD, 0.15))
        w.add_tensor(p + "attn_v.weight", mat(N_EMBD * N_HEAD_KV // N_HEAD, N_EMBD, 0.15))
        w.add_tensor(p + "attn_output.weight", mat(N_EMBD, N_EMBD, 0.1))
        w.add_tensor(p + "ffn_norm.weight", ones(N_EMBD))
        w.add_tensor(p + "ffn_gate.weight", mat(N_FF, N_EMBD, 0.15))
        w.add_tensor(p + "ffn_up.weight", mat(N_FF, N_EMBD, 0.15))
        w.add_tensor(p + "ffn_down.weight", mat(N_EMBD, N_FF, 0.1))
    w.add_tensor("output_norm.weight", ones(N_EMBD))
    w.add_tensor("output.weight", mat(n_vocab, N_EMBD, 0.3))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return path


def is_tiny_model(path: str | os.PathLike) -> bool:
    """True when the GGUF at ``path`` is this module's stand-in (by ``general.name`` in its header, read
    without its tensors: ``pipeline.trading.llm.modelfile.read_header``); False for any other model or
    an unreadable file."""
    from pipeline.trading.llm.modelfile import read_header

    try:
        return read_header(Path(path)).metadata.get("general.name") == TINY_NAME
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.trading.llm.tinymodel", description=__doc__.splitlines()[0])
    ap.add_argument("out", help="where to write the GGUF (e.g. models/generated/tiny.gguf)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    a = ap.parse_args(argv)
    p = write_tiny_gguf(a.out, seed=a.seed)
    print(f"wrote {p} ({p.stat().st_size} bytes, stand-in {TINY_NAME})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
