"""VERL 0.9.1's own trainer on a CPU-only machine (issue #15).

Pieces, each in its module:

* :mod:`.platform`: VERL platform ``cpu`` (device ``cpu``, backend ``gloo``, fake Ray GPUs,
  a device module whose cache/memory/RNG calls work on a CPU);
* :mod:`.plugin`: the ``verl.plugins`` entry point that registers it in every VERL process;
* :mod:`.rollout`: a CPU rollout backend (``rollout.name=kit_cpu``) serving with the kit's
  continuous-batching engine and taking the FSDP2 actor's weights after every step;
* :mod:`.patches`: the two patches to VERL internals, named and checked;
* :mod:`.ray_local`: a loopback-only Ray head started and stopped by the kit;
* :mod:`.runner`: the checks, the Hydra overrides, the session (``run_session``, ``run_cpu``);
* :mod:`.session`: what runs inside the namespace (Ray start, launches, watcher, Ray stop);
* :mod:`.tiny_run`: the tiny SFT policy and two-step config of the tests and the benchmark.

Nothing here is imported on a GPU run; selecting it on a machine with CUDA is refused
(:func:`.runner.require_cpu_machine`).
"""
