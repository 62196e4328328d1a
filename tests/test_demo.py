"""The README's demo runs and its block matches PyTorch eager."""

from luminal import demo


def test_demo_runs_and_matches(capsys):
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "OK: worst difference" in out and "op counts:" in out
    assert "Device(" not in out  # a device prints as its name, not its dataclass
