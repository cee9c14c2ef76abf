"""A policy folder served on loopback as an OpenAI-compatible completions server (report §3.2's
rollout engine, as SGLang serves it on a cluster, but on this machine's CPU).

The kit's continuous-batching engine (:class:`kit.rollout.engine.ContinuousBatchingEngine`)
behind FastAPI + uvicorn, speaking the subset of ``/v1/completions`` that
:class:`kit.rollout.backends.OpenAIBackend` sends: a token-id prompt, ``max_tokens``,
``temperature``, ``top_p``, ``stop_token_ids`` (the stop id is kept in the output), ``logprobs``
(``log softmax(logits / T)`` of each sampled id, as the engine gives them), and vLLM's
``return_token_ids`` / ``return_tokens_as_token_ids``. Concurrent requests share the engine's
decode steps (each request is one coroutine in uvicorn's event loop); a client that disconnects
has its generation cancelled (its row freed at the next decode step). Also ``GET /v1/models``
and ``GET /health``.

Used where a route needs a served policy and no GPU server exists: stage 3's hard subset
(:func:`kit.bridge.hard_subset.prepare_stage3_data`) on the VERL CPU runtime. Start it with
:func:`serve_policy` (a child process, stopped on exit even when the body raises) or from a
shell::

    python -m kit serve --policy runs/smoke/04_rl_stage2/policy --port 30000

Limits: a body over ``--max-body-bytes`` (:data:`MAX_BODY_BYTES`) gets HTTP 413 before it is read
(a ``Content-Length`` over it at once, a chunked body as soon as it passes it); a ``prompt`` that
leaves no room for one new token in the policy's context (``max_position_embeddings``) gets 400
naming ``prompt`` and the limit, before anything is queued.

Listens on loopback only. Not an SGLang replacement: one model forward at a time, CPU float32,
``n = 1``, no string prompts, no stop strings, no streaming.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import uvicorn
from fastapi import FastAPI, HTTPException, Request

from kit.models import load_policy
from kit.rollout.engine import ContinuousBatchingEngine

#: default request-body limit, bytes: a prompt of the longest context the kit serves (Qwen3's 40,960
#: positions) as JSON ids takes at most 8 bytes a token (6 digits, a separator), 0.3 MiB; 8 MiB leaves
#: 20x room for the other fields and bounds what one request can make the server hold
MAX_BODY_BYTES = 8 * 2**20


class BadRequest(ValueError):
    """A request field the server cannot serve (answered with HTTP 400 naming the field)."""


class BodyTooLarge(ValueError):
    """A request body over the server's limit (answered with HTTP 413)."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _int_list(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise BadRequest(f"{name}: expected a list of token ids (ints), got {type(value).__name__}")
    return value


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{name}: expected a number, got {value!r}")
    if not math.isfinite(value):  # JSON's NaN / Infinity: a NaN temperature samples the last id with null log-probs
        raise BadRequest(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def parse_completion_request(body: Any, *, model_name: str, vocab_size: int, eos_id: int | None,
                             max_context: int | None = None) -> dict[str, Any]:
    """Check a ``/v1/completions`` body and return the engine's arguments.

    Args:
        body: the decoded JSON body.
        model_name: the served name (``model`` must equal it).
        vocab_size: V; every prompt id must lie in [0, V).
        eos_id: added to the stop ids unless ``ignore_eos`` (as vLLM and SGLang do).
        max_context: the served policy's context, tokens (prompt + new tokens); a prompt must
            leave room for one new token, so it may hold at most ``max_context - 1`` tokens.
            None: no limit here (the engine still checks).
    Returns:
        ``{"prompt_ids", "max_new_tokens", "temperature", "top_p", "stop_ids", "logprobs",
        "return_token_ids", "token_id_strings", "skip_special_tokens"}``.
    Raises:
        BadRequest: naming the field: not an object, unknown ``model``, a ``prompt`` that is not
            a non-empty list of ids in the vocabulary or that does not fit ``max_context`` (the
            message gives the limit), ``max_tokens`` < 0, sampling values out of
            range or not finite (JSON's ``NaN`` / ``Infinity``), ``n`` != 1, ``stop`` strings, ``stream``/``echo``.
    """
    if not isinstance(body, dict):
        raise BadRequest(f"body: expected a JSON object, got {type(body).__name__}")
    model = body.get("model", model_name)
    if model != model_name:
        raise BadRequest(f"model: unknown model {model!r}; this server serves {model_name!r}")
    prompt = _int_list(body.get("prompt"), "prompt")
    if not prompt:
        raise BadRequest("prompt: empty")
    if max_context is not None and len(prompt) >= max_context:
        raise BadRequest(f"prompt: {len(prompt)} tokens do not fit the served policy's context of {max_context} "
                         f"tokens (at most {max_context - 1} prompt tokens, leaving room for one new token)")
    bad = [t for t in prompt if not 0 <= t < vocab_size]
    if bad:
        raise BadRequest(f"prompt: token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}")
    max_tokens = body.get("max_tokens", 16)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise BadRequest(f"max_tokens: expected an int >= 0, got {max_tokens!r}")
    temperature, top_p = _number(body, "temperature", 1.0), _number(body, "top_p", 1.0)
    if temperature < 0:
        raise BadRequest(f"temperature: must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise BadRequest(f"top_p: must be in (0, 1], got {top_p}")
    if body.get("n", 1) != 1:
        raise BadRequest(f"n: only n=1 is served, got {body.get('n')!r}")
    if body.get("stop"):
        raise BadRequest("stop: stop strings are not served; send stop_token_ids")
    for flag in ("stream", "echo"):
        if body.get(flag):
            raise BadRequest(f"{flag}: not served")
    stop = list(_int_list(body.get("stop_token_ids") or [], "stop_token_ids"))
    if eos_id is not None and not body.get("ignore_eos") and eos_id not in stop:
        stop.append(int(eos_id))
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
        raise BadRequest(f"logprobs: expected an int >= 0 or null, got {logprobs!r}")
    return {"prompt_ids": prompt, "max_new_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
            "stop_ids": stop, "logprobs": logprobs is not None, "return_token_ids": bool(body.get("return_token_ids")),
            "token_id_strings": bool(body.get("return_tokens_as_token_ids")),
            "skip_special_tokens": bool(body.get("skip_special_tokens", True))}


#: seconds between checks that a waiting client is still connected
DISCONNECT_POLL_S = 0.05


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, read only while it stays within ``limit`` bytes.

    Raises:
        BodyTooLarge: a ``Content-Length`` over ``limit`` (refused before any of the body is
            read), or a body without one (chunked) that passes ``limit`` while it streams in.
        BadRequest: a ``Content-Length`` that is not a non-negative integer.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise BadRequest(f"Content-Length: expected a number of bytes, got {declared[:40]!r}")
        if int(declared) > limit:
            raise BodyTooLarge(f"body: {int(declared)} bytes is over this server's limit of {limit} bytes "
                               "(--max-body-bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body: over this server's limit of {limit} bytes (--max-body-bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


async def _unless_disconnected(request: Request, work: Any) -> Any:
    """Await ``work`` (a generation); if the client disconnects first, cancel it (the engine frees
    its row at the next decode step instead of decoding up to ``max_tokens`` for nobody) and answer
    499, which nobody reads."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise HTTPException(499, "client disconnected")


def build_app(model: Any, tokenizer: Any, *, model_name: str, slots: int = 64, seed: int = 0,
              max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The FastAPI app serving ``model`` with one :class:`ContinuousBatchingEngine` (``slots`` rows,
    base seed ``seed``: the same requests in the same order give the engine's own tokens). A body
    over ``max_body_bytes`` gets 413; a prompt the engine's context cannot hold gets 400."""
    engine = ContinuousBatchingEngine(model, tokenizer, slots=slots, seed=seed)
    vocab = int(model.get_input_embeddings().num_embeddings)
    app = FastAPI(title="kit policy server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "engine": dict(engine.stats)}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "kit",
                                            "max_model_len": engine.max_context}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        try:
            raw = await read_body(request, max_body_bytes)
        except BodyTooLarge as exc:
            raise HTTPException(413, str(exc)) from exc
        except BadRequest as exc:
            raise HTTPException(400, str(exc)) from exc
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested too deep to decode
            raise HTTPException(400, f"body: not JSON ({type(exc).__name__}: {exc})") from exc
        try:
            req = parse_completion_request(body, model_name=model_name, vocab_size=vocab,
                                           eos_id=tokenizer.eos_token_id, max_context=engine.max_context)
            gen = await _unless_disconnected(request, engine.generate(
                req["prompt_ids"], req["max_new_tokens"], req["temperature"], req["top_p"], req["stop_ids"]))
        except ValueError as exc:  # BadRequest, or the engine's check (e.g. a prompt filling the context)
            raise HTTPException(400, str(exc)) from exc
        ids = list(gen.token_ids)
        hit = ids[-1] if gen.finish_reason == "stop" and ids else None
        choice: dict[str, Any] = {
            "index": 0, "text": tokenizer.decode(ids, skip_special_tokens=req["skip_special_tokens"]),
            "finish_reason": gen.finish_reason, "stop_reason": hit, "logprobs": None}
        if req["return_token_ids"]:
            choice["token_ids"] = ids
        if req["logprobs"]:
            toks = [f"token_id:{t}" for t in ids] if req["token_id_strings"] else \
                tokenizer.convert_ids_to_tokens(ids)
            choice["logprobs"] = {"tokens": toks, "token_logprobs": list(gen.logprobs or []),
                                  "top_logprobs": None, "text_offset": None}
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model_name, "choices": [choice],
                "usage": {"prompt_tokens": len(req["prompt_ids"]), "completion_tokens": len(ids),
                          "total_tokens": len(req["prompt_ids"]) + len(ids)}}

    return app


def _watch_parent(parent_pid: int) -> None:
    """Exit this server when the process that started it is gone (no orphan servers)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


def run_server(policy_dir: str | os.PathLike, *, host: str = "127.0.0.1", port: int = 0, model_name: str = "",
               slots: int = 64, seed: int = 0, threads: int = 0, max_body_bytes: int = MAX_BODY_BYTES,
               port_file: str = "", parent_pid: int = 0) -> int:
    """Serve ``policy_dir`` in this process until it is stopped (``python -m kit serve``, whose
    ``--help`` explains each argument); returns 0 after a clean shutdown.

    ``port=0`` lets the OS pick a free port; the real one is printed (``serving <url>``) and, with
    ``port_file``, written there once the socket is bound. With ``parent_pid`` the server exits
    when that process does (:func:`serve_policy`).

    Raises:
        ValueError: before serving, a bad argument (named as its ``--option``): a host that is not
            loopback, a port outside 0-65535, ``slots`` or ``max_body_bytes`` < 1, a folder that is
            not a loadable policy, a port that is taken.
    """
    if not _is_loopback(host):
        raise ValueError(f"--host {host}: the server listens on loopback only (127.0.0.1 or ::1)")
    if not 0 <= port <= 65535:
        raise ValueError(f"--port {port}: expected 0 (any free port) to 65535")
    if slots < 1:
        raise ValueError(f"--slots {slots}: expected >= 1")
    if max_body_bytes < 1:
        raise ValueError(f"--max-body-bytes {max_body_bytes}: expected >= 1")
    if threads > 0:
        torch.set_num_threads(threads)
    if parent_pid:
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    policy = Path(policy_dir).resolve()
    what = "expected a model and tokenizer written by kit.models.save_policy or a Hugging Face checkpoint"
    if not (policy / "config.json").is_file():
        raise ValueError(f"--policy {policy}: not a policy folder (no config.json; {what})")
    try:
        model, tok = load_policy(policy)
    except (OSError, ValueError) as exc:  # e.g. a model folder without its tokenizer files
        raise ValueError(f"--policy {policy}: cannot load it ({what}): {type(exc).__name__}: "
                         f"{str(exc).strip()[:300]}") from exc
    app = build_app(model, tok, model_name=model_name or str(policy), slots=slots, seed=seed,
                    max_body_bytes=max_body_bytes)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # the port is taken, or the address is not on this machine
        sock.close()
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from exc
    port = sock.getsockname()[1]
    url = f"http://{host if family == socket.AF_INET else f'[{host}]'}:{port}/v1"
    print(f"serving {url} model={model_name or policy}", flush=True)
    if port_file:
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, port_file)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    server.run(sockets=[sock])
    return 0


def _get(url: str, timeout: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except (urllib.error.URLError, OSError):
        return 0


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM ``proc`` (uvicorn shuts down), then SIGKILL after ``grace_s`` seconds; waits for it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def serve_policy(policy_dir: str | os.PathLike, *, slots: int = 64, seed: int = 0, threads: int = 0,
                 host: str = "127.0.0.1", port: int = 0, model_name: str = "",
                 startup_timeout_s: float = 300.0, max_body_bytes: int = MAX_BODY_BYTES) -> Iterator[str]:
    """Serve ``policy_dir`` in a child process for the ``with`` body; yields its base URL
    (``http://127.0.0.1:<port>/v1``, the port the OS picked when ``port=0``) for
    :class:`kit.rollout.backends.OpenAIBackend`, whose model name is ``model_name`` (default
    ``policy_dir`` resolved). The server is stopped, and its port closed, when the body ends or
    raises; it also exits by itself if this process dies.

    Args:
        policy_dir: a policy folder (``kit.models.load_policy``).
        slots, seed: the engine's rows and base sampling seed.
        threads: torch CPU threads of the server (0: torch's default).
        host: a loopback address.
        port: 0 = any free port.
        startup_timeout_s: seconds to wait for the model to load and ``/health`` to answer.
        max_body_bytes: request bodies over this many bytes get HTTP 413.
    Raises:
        ValueError: ``host`` is not a loopback address.
        FileNotFoundError: ``policy_dir`` does not exist.
        RuntimeError: the server exited or did not answer within ``startup_timeout_s`` (with its output).
    """
    if not _is_loopback(host):
        raise ValueError(f"serve_policy: host {host!r} is not a loopback address (the server listens on loopback only)")
    policy = Path(policy_dir).resolve()
    if not policy.is_dir():
        raise FileNotFoundError(f"serve_policy: policy folder not found: {policy}")
    with tempfile.TemporaryDirectory(prefix="kit_serve_") as tmp:
        port_file, log_path = Path(tmp) / "port", Path(tmp) / "server.log"
        cmd = [sys.executable, "-m", "kit", "serve", "--policy", str(policy), "--host", host, "--port", str(port),
               "--slots", str(slots), "--seed", str(seed), "--threads", str(threads),
               "--max-body-bytes", str(max_body_bytes), "--model-name",
               model_name or str(policy), "--port-file", str(port_file), "--parent-pid", str(os.getpid())]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + startup_timeout_s
            url = ""
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve_policy: the server for {policy} exited with code {proc.returncode}: "
                                       f"{log_path.read_text()[-2000:]}")
                if not url and port_file.exists():
                    shown = f"[{host}]" if ":" in host else host
                    url = f"http://{shown}:{int(port_file.read_text())}/v1"
                if url and _get(url[:-3] + "/health", timeout=5.0) == 200:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"serve_policy: the server for {policy} did not answer within "
                                       f"{startup_timeout_s:.0f} s: {log_path.read_text()[-2000:]}")
                time.sleep(0.2)
            yield url
        finally:
            stop_process(proc)
