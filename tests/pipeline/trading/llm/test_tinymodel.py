"""The generated stand-in GGUF: small, reproducible, loadable by llama.cpp, byte-level vocabulary."""

from __future__ import annotations

from llama_cpp import Llama

from pipeline.trading.llm.tinymodel import TOKEN_BOS, is_tiny_model, main, write_tiny_gguf
from tests.support.llm import tiny_model


def test_the_model_is_well_under_a_megabyte_and_the_same_seed_gives_the_same_bytes(tmp_path):
    a = write_tiny_gguf(tmp_path / "a.gguf", seed=7)
    b = write_tiny_gguf(tmp_path / "b.gguf", seed=7)
    c = write_tiny_gguf(tmp_path / "c.gguf", seed=8)
    assert a.stat().st_size < 512 * 1024
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert not (tmp_path / "a.gguf.tmp").exists()


def test_llama_cpp_loads_it_and_utf8_text_round_trips_through_the_tokenizer():
    llm = Llama(tiny_model(), n_ctx=256, n_threads=1, verbose=False)
    try:
        text = bytes(range(1, 128)) + 'é€ 💹'.encode() + b' {"inst":1,"act":"BUY"}\n'
        toks = llm.tokenize(text, add_bos=True)
        assert toks[0] == TOKEN_BOS and llm.detokenize(toks[1:]) == text
        assert len(llm.tokenize(b"abc 12", add_bos=False)) == 6  # one token per printable byte
        assert llm.n_vocab() == 3 + 256 + 95
    finally:
        llm.close()


def test_the_cli_writes_it_and_it_is_recognised_as_the_stand_in(tmp_path, capsys):
    out = tmp_path / "models" / "tiny.gguf"
    assert main([str(out)]) == 0 and "stand-in" in capsys.readouterr().out
    assert is_tiny_model(out)
    (tmp_path / "other.gguf").write_bytes(b"GGUF" + bytes(60))
    assert not is_tiny_model(tmp_path / "other.gguf") and not is_tiny_model(tmp_path / "missing.gguf")
