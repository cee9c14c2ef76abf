"""Verifier workers hash strings with one fixed seed (issue #41, kit.reward.dispatch): sympy's set and
dict orders, and so its path to a verdict, repeat on every worker of every run."""

from kit.reward import Verifier


def test_workers_run_with_pythonhashseed_0_whatever_the_host_sets(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "random")
    with Verifier(2) as v:
        assert v.verify("1", r"\boxed{\frac{2}{2}}").correct
        for pid in v.worker_pids():
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
            assert env[b"PYTHONHASHSEED"] == b"0", pid
