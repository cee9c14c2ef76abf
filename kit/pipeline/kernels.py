"""The kernel manager the runner starts its notebook kernels with (issue #31: a quiet console).

Each kernel started over TCP logs, before every notebook, ipykernel's warning "Kernel is running
over TCP without encryption ..." (``ipykernel.kernelapp.IPKernelApp.init_sockets``): its ports are
on loopback of the runner's own machine, so the warning names a risk the user cannot act on and
hides the lines that matter. It is suppressed at its source, not filtered from the output: the
kernels talk over IPC (Unix domain sockets), the transport the warning itself recommends, so
ipykernel has nothing to warn about. Every other kernel log line still reaches the console. Each
kernel's sockets live in a private folder of its own under Jupyter's runtime directory (mode 0700,
removed when the kernel is cleaned up): jupyter_client's default, ``kernel-ipc-N`` relative to the
working directory, put them in the checkout's ``notebooks/``, and two runs started from one checkout
could pick the same ``N`` at once (a kernel that never answered; messages with invalid signatures).

The runner starts every notebook on one kernel, :data:`KERNEL_NAME`, whatever the source names;
papermill keeps the source's ``kernelspec`` in the executed notebook, so :func:`record_kernelspec`
writes the kernel that ran there instead (issue #44 part 9).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import nbformat
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.paths import jupyter_runtime_dir
from traitlets import default

#: The kernel the runner executes every notebook on (the runner's own Python's ipykernel).
KERNEL_NAME = "python3"


class QuietKernelManager(AsyncKernelManager):
    """papermill's kernel manager (``kernel_manager_class`` of its nbclient engine) with the IPC
    transport as default instead of TCP; everything else is jupyter_client's."""

    @default("transport")
    def _default_transport(self) -> str:
        return "ipc"

    @default("ip")
    def _default_ip(self) -> str:
        """The IPC socket path prefix: a fresh private folder per kernel (no two runs share it)."""
        root = jupyter_runtime_dir()
        os.makedirs(root, mode=0o700, exist_ok=True)
        self._ipc_dir = tempfile.mkdtemp(prefix="kit-kernel-", dir=root)
        return os.path.join(self._ipc_dir, "kernel-ipc")

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        folder = getattr(self, "_ipc_dir", None)
        if folder and not restart:
            shutil.rmtree(folder, ignore_errors=True)


def kernelspec(name: str = KERNEL_NAME) -> dict[str, str]:
    """The notebook-metadata ``kernelspec`` of the installed kernel ``name``: ``{"name",
    "display_name", "language"}`` (display name and language ``"python"`` from its ``kernel.json``;
    the name alone stands in for a missing display name)."""
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        return {"name": name, "display_name": name, "language": "python"}
    return {"name": name, "display_name": spec.display_name or name, "language": spec.language or "python"}


def record_kernelspec(path: str | os.PathLike, name: str = KERNEL_NAME) -> None:
    """Write the kernel that ran into the executed notebook at ``path`` (``metadata.kernelspec``; also
    ``metadata.language_info.name``); nothing when the file is missing or unreadable (the run failed
    before papermill wrote it whole). papermill keeps the *source's* kernelspec even when it is told another ``kernel_name``."""
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError):  # missing, or cut short by a crash: left as it is, the failure is reported
        return
    spec = kernelspec(name)
    if nb.metadata.get("kernelspec") == spec:
        return
    nb.metadata["kernelspec"] = spec
    nb.metadata.setdefault("language_info", {})["name"] = spec["language"]
    nbformat.write(nb, path)
