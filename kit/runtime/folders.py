"""The ``init_dir`` argument of the runtime contract, checked once for both runtimes.

``init_dir`` is always the upstream *run* folder (``sft/``, ``stage1/``, ...), whose ``policy/``
a step starts from; passing the ``policy/`` folder itself, ``None`` or a folder whose notebook
never finished are the mistakes this module names before anything is trained or launched.
"""

from __future__ import annotations

import os
from pathlib import Path

#: files that mark a saved model folder (``kit.models.save_policy``, a merged VERL policy, a hub snapshot)
POLICY_FILES = ("tokenizer.json", "tokenizer_config.json", "model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "generation_config.json")


def upstream_run(init_dir: str | os.PathLike | None, where: str, *, need_policy: bool = True) -> Path:
    """``init_dir`` as a Path, after checking that it is an upstream run folder.

    Args:
        init_dir: the argument of a runtime function (``run_stage``, ``prepare_hard_subset``, ``run_ablation``).
        where: the function's name, put first in every message.
        need_policy: also require ``init_dir/policy`` to exist (False where the step reads nothing
            of the upstream policy, e.g. stage 3's pool from a given solve-count file).

    Raises:
        ValueError: ``init_dir`` is None, or is a policy folder (names the run folder to pass instead).
        FileNotFoundError: ``init_dir`` does not exist, or holds no ``policy/`` (its notebook did not finish).
    """
    if init_dir is None:
        raise ValueError(f"{where}: init_dir is required: the upstream run folder (e.g. the sft/ or stage1/ "
                         "folder of the run) whose policy/ this step starts from")
    path = Path(init_dir)
    if not (path / "policy").exists() and (path.name == "policy" or any((path / f).exists() for f in POLICY_FILES)):
        raise ValueError(f"{where}: init_dir {path} is a policy folder; pass the run folder that holds it, "
                         f"{path.parent} (init_dir is always an upstream run folder)")
    if not need_policy:
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{where}: init_dir {path} does not exist; it is the upstream run folder, written "
                                "by the upstream notebook (run it first)")
    if not (path / "policy").exists():
        raise FileNotFoundError(f"{where}: init_dir {path} has no policy/: the upstream notebook writes it when it "
                                "finishes (run or resume it first)")
    return path
