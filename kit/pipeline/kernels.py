"""The kernel manager the runner starts its notebook kernels with (issue #31: a quiet console).

Each kernel started over TCP logs, before every notebook, ipykernel's warning "Kernel is running
over TCP without encryption ..." (``ipykernel.kernelapp.IPKernelApp.init_sockets``): its ports are
on loopback of the runner's own machine, so the warning names a risk the user cannot act on and
hides the lines that matter. It is suppressed at its source, not filtered from the output: the
kernels talk over IPC (Unix domain sockets beside the kernel's connection file, in Jupyter's
runtime directory, readable by the user only), the transport the warning itself recommends, so
ipykernel has nothing to warn about. Every other kernel log line still reaches the console.
"""

from __future__ import annotations

from jupyter_client.manager import AsyncKernelManager
from traitlets import default


class QuietKernelManager(AsyncKernelManager):
    """papermill's kernel manager (``kernel_manager_class`` of its nbclient engine) with the IPC
    transport as default instead of TCP; everything else is jupyter_client's."""

    @default("transport")
    def _default_transport(self) -> str:
        return "ipc"
