"""The fuzzed frames of ``malformed_frames`` (``bench.chaos.malformed``): every one is refused by the
feed's decoder or fails its checksum."""

from __future__ import annotations

from bench.chaos.malformed import fuzz_frames


def test_fuzzed_frames_are_each_refused_by_the_decoder_or_fail_their_checksum():
    from pipeline.trading.bitget.protocol import FrameKind, make_decoder

    frames, badsum = fuzz_frames(3_000, seed=1, first_seq=10)
    kinds = [make_decoder().decode(f).kind for f in frames]
    assert sum(k in (FrameKind.REJECTED, FrameKind.UNKNOWN) for k in kinds) == 3_000 - badsum
    assert sum(k == FrameKind.SNAPSHOT for k in kinds) == badsum > 0
    assert any(isinstance(f, bytes) for f in frames) and any(isinstance(f, str) for f in frames)
