"""Torch threads sized to the cores other processes leave free (kit.train.common.LoadAdaptiveThreads)."""

from __future__ import annotations

import os

import pytest
import torch

from kit.train import common


@pytest.fixture(autouse=True)
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


class FakeClock:
    """Stands in for LoadAdaptiveThreads._sample: (wall s, own CPU s, busy jiffies, total jiffies)."""

    def __init__(self):
        self.t, self.own, self.busy = 0.0, 0.0, 0

    def advance(self, seconds: float, own_cores: float, other_cores: float) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        self.t += seconds
        self.own += own_cores * seconds
        self.busy += round((own_cores + other_cores) * seconds * ticks)

    def __call__(self):
        return (self.t, self.own, self.busy, 0)


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
