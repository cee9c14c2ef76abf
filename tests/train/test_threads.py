"""Torch threads sized to the cores other processes leave free (kit.train.common.LoadAdaptiveThreads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kit.train import common


@pytest.fixture(autouse=True)
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


class FakeClock:
    """Stands in for LoadAdaptiveThreads._sample: (wall s, own CPU s, busy jiffies, total jiffies,
    niced busy jiffies)."""

    def __init__(self):
        self.t, self.own, self.busy, self.niced = 0.0, 0.0, 0, 0

    def advance(self, seconds: float, own_cores: float, other_cores: float, niced_cores: float = 0.0) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        self.t += seconds
        self.own += own_cores * seconds
        self.busy += round((own_cores + other_cores + niced_cores) * seconds * ticks)
        self.niced += round(niced_cores * seconds * ticks)

    def __call__(self):
        return (self.t, self.own, self.busy, 0, self.niced)


def policy_with(clock, monkeypatch, max_threads=2, cores=2):
    monkeypatch.setattr(common.LoadAdaptiveThreads, "_sample", staticmethod(clock))
    monkeypatch.setattr(common.os, "sched_getaffinity", lambda pid: set(range(cores)))
    return common.LoadAdaptiveThreads(max_threads, every_s=5.0, first_s=0)


def test_threads_follow_the_cores_others_leave_free(monkeypatch):
    clock = FakeClock()
    p = policy_with(clock, monkeypatch)
    assert p.threads == 2 and torch.get_num_threads() == 2
    clock.advance(6, own_cores=2.0, other_cores=1.0)  # one busy process beside: our own use does not count
    assert p.update() == 1 and torch.get_num_threads() == 1
    assert p.history[-1][1] == pytest.approx(1.0, abs=0.01)
    clock.advance(6, own_cores=1.0, other_cores=0.1)  # it stopped
    assert p.update() == 2
    clock.advance(6, own_cores=0.5, other_cores=5.0)  # heavily loaded: never below one thread
    assert p.update() == 1


def test_niced_neighbours_do_not_take_threads_from_an_unniced_trainer(monkeypatch):
    clock = FakeClock()
    p = policy_with(clock, monkeypatch)
    assert p.ignore_niced == (os.getpriority(os.PRIO_PROCESS, 0) <= 0)
    p.ignore_niced = True  # as in an unniced trainer (the test run itself may be niced)
    clock.advance(6, own_cores=1.9, other_cores=0.0, niced_cores=1.0)  # a nice-19 job beside: it yields
    assert p.update() == 2 and p.history[-1][1] == pytest.approx(0.0, abs=0.01)
    clock.advance(6, own_cores=1.0, other_cores=1.0, niced_cores=0.5)  # an unniced one still counts
    assert p.update() == 1
    p.ignore_niced = False  # a niced trainer yields to everyone
    clock.advance(6, own_cores=1.9, other_cores=0.0, niced_cores=1.0)
    assert p.update() == 1


def test_cpu_jiffies_read_the_nice_column(monkeypatch, tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 40 20 500 10 1 2 3 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(stat if path == "/proc/stat" else path, *a, **k))
    assert common._cpu_jiffies() == (100 + 40 + 20 + 1 + 2 + 3, 676, 40)


def test_no_measurement_before_every_s_and_cap_by_cores(monkeypatch):
    clock = FakeClock()
    p = policy_with(clock, monkeypatch, max_threads=8, cores=2)
    assert p.max_threads == 2
    clock.advance(2, own_cores=1.0, other_cores=1.0)
    assert p.update() == 2 and not p.history  # too soon: unchanged
    assert p.update(force=True) == 1


def test_set_threads_modes():
    assert common.set_threads(1) is None and torch.get_num_threads() == 1
    p = common.set_threads(-1)
    assert isinstance(p, common.LoadAdaptiveThreads) and p.max_threads == 1
    others = p.others_cores()
    assert others is None or others >= 0.0  # a real /proc/stat reading where there is one


@pytest.mark.parametrize("env, expect", [({}, "10000"), ({"GOMP_SPINCOUNT": "5"}, "5"),
                                         ({"OMP_WAIT_POLICY": "PASSIVE"}, None)],
                         ids=["default", "user's spin count", "user's wait policy"])
def test_importing_kit_bounds_openmp_spinning_unless_the_user_chose(env, expect):
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    code = "import sys, kit, os; assert 'torch' not in sys.modules; print(os.environ.get('GOMP_SPINCOUNT'))"
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expect)
