"""rill.train.Progress: plain lines off a terminal, a rich bar on one."""
import io

import pytest

import rill
from rill.train import Progress, progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_plain_lines_carry_step_metrics_rate_and_eta():
    clock, out = Clock(), io.StringIO()
    with Progress(total=200, description="train", file=out, every_steps=50, every_seconds=None,
                  clock=clock) as bar:
        assert bar.plain
        for step in range(200):
            clock.now += 0.02
            bar.update(loss=0.5 - step / 1000, acc=rill.tensor(0.25))
    lines = out.getvalue().splitlines()
    assert len(lines) == 4  # steps 50, 100, 150, 200; the last one is not written twice
    assert lines[0] == "train  step 50/200  loss 0.451  acc 0.25  50.0 it/s  elapsed 0:00:01  " \
                       "eta 0:00:03"
    assert lines[-1] == "train  step 200/200  loss 0.301  acc 0.25  50.0 it/s  elapsed 0:00:04"


def test_plain_lines_by_time_and_a_final_line():
    clock, out = Clock(), io.StringIO()
    bar = Progress(description="fit", file=out, every_seconds=10, clock=clock, unit="img")
    for _ in range(7):
        clock.now += 3
        bar.update(n=32, loss=1.23456)
    bar.close()
    bar.close()  # closing twice is harmless
    lines = out.getvalue().splitlines()
    # a line at 12 s (4 updates); none at 21 s (9 s later), but the final line
    assert lines == ["fit  step 128  loss 1.235  10.7 img/s  elapsed 0:00:12",
                     "fit  step 224  loss 1.235  10.7 img/s  elapsed 0:00:21"]


def test_slow_steps_read_as_seconds_per_step():
    clock, out = Clock(), io.StringIO()
    with Progress(total=3, file=out, clock=clock) as bar:
        clock.now += 120
        bar.update()
    assert "120.0 s/it" in out.getvalue() and "eta 0:04:00" in out.getvalue()


def test_not_a_terminal_means_plain_on_stdout(capsys):
    with Progress(total=2, description="eval") as bar:
        bar.update(loss=0.5)
        bar.print("a note")
        bar.update(loss=0.25)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("eval  step 1/2  loss 0.5")
    assert out[1] == "a note"
    assert out[2].startswith("eval  step 2/2  loss 0.25")


def test_iterating_counts_items_when_the_body_is_done():
    clock, out = Clock(), io.StringIO()
    bar = progress(["a", "b", "c", "d"], description="data", file=out, clock=clock)
    seen = []
    for item in bar:
        seen.append((item, bar.steps))
        clock.now += 1
        bar.set(last=item)
    assert seen == [("a", 0), ("b", 1), ("c", 2), ("d", 3)]
    assert out.getvalue().splitlines()[-1] == "data  step 4/4  last d  1.0 it/s  elapsed 0:00:04"


def test_breaking_out_of_the_loop_closes_the_display():
    out = io.StringIO()
    for i in progress(iter(range(100)), file=out, every_seconds=None):
        if i == 5:
            break
    assert out.getvalue().splitlines()[-1].startswith("train  step 5  ")


def test_a_plain_progress_cannot_be_iterated():
    with pytest.raises(rill.ArgumentError, match="rill.train.progress"):
        iter(Progress(total=1, file=io.StringIO())).__next__()


def test_rich_bar_renders_metrics():
    out = io.StringIO()
    with Progress(total=10, description="train", file=out, plain=False) as bar:
        assert not bar.plain
        for _ in range(10):
            bar.update(loss=0.125)
    text = out.getvalue()
    assert "train" in text and "10/10" in text and "loss 0.125" in text
