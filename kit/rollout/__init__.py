"""Multi-turn tool-use rollout: protocol, agent loop, backends, token audit, colored view.

rStar2-Agent §2, §2.1. Public API::

    from kit.rollout import (Generation, Backend, ScriptedBackend, HFBackend, OpenAIBackend,
                             Trajectory, run_trajectory, run_group, rollout_batch, run_coroutine,
                             audit_trajectory, trajectory_html, parse_tool_calls, render_result)
"""

from kit.rollout.audit import AuditReport, audit_trajectory
from kit.rollout.backends import Backend, Generation, HFBackend, OpenAIBackend, ScriptedBackend
from kit.rollout.loop import (
    CallRecord,
    Executor,
    Trajectory,
    rollout_batch,
    run_coroutine,
    run_group,
    run_trajectory,
)
from kit.rollout.protocol import ERROR_KINDS, ParsedCall, parse_tool_calls, render_result, truncate_tokens
from kit.rollout.view import legend_html, show_trajectory, trajectory_html

__all__ = [
    "AuditReport", "audit_trajectory", "Backend", "Generation", "HFBackend", "OpenAIBackend", "ScriptedBackend",
    "CallRecord", "Executor", "Trajectory", "rollout_batch", "run_group", "run_coroutine", "run_trajectory",
    "ERROR_KINDS", "ParsedCall", "parse_tool_calls", "render_result", "truncate_tokens", "legend_html", "show_trajectory", "trajectory_html",
]
