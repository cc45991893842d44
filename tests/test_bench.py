"""rnncc bench's pure parts (no GPU): the targets each row is judged by, as the issues ask."""

from __future__ import annotations

from rnncc.bench import Config, target_speedup


def test_targets_follow_the_issues():
    """Issue 14: LSTM fp16 B=8 ≥ 1.5×, GRU fp16 B=8 ≥ 5×, LSTM fp16 B=64 H=1024 S=128 ≥ 1.2×,
    fp32 and bf16 B=8 ≥ 5×; issue 15: stacks ≥ 8×, GNMT ≥ 2×; issue 17: the training rows."""
    for hidden in (256, 512, 1024):
        assert target_speedup(Config("lstm", "float16", hidden, 8)) == 1.5
        assert target_speedup(Config("gru", "float16", hidden, 8)) == 5.0
        assert target_speedup(Config("lstm", "float32", hidden, 8)) == 5.0
        assert target_speedup(Config("gru", "bfloat16", hidden, 8)) == 5.0
    assert target_speedup(Config("lstm", "float16", 1024, 64, seq_len=128)) == 1.2
    assert target_speedup(Config("lstm", "float16", 1024, 8, layers=4)) == 8.0
    assert target_speedup(Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt")) == 2.0
    assert target_speedup(Config("lstm", "float32", 1024, 64, passes="forward+backward")) == 1.5
    assert target_speedup(Config("gru", "float16", 512, 8, passes="forward+backward")) == 2.0
    assert target_speedup(Config("lstm", "bfloat16", 1024, 8, passes="forward+backward")) == 3.0
