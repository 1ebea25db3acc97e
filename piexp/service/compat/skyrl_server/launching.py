"""Starting skyrl __SKYRL_VERSION__'s Tinker API server and its engine in piexp's server
venv, as ``python launcher.py api|engine [skyrl args]``:

1. **No torch on CPU** (:func:`import_without_torch`). skyrl's JAX path imports ``torch``
   at module level in ``skyrl/backends/renderer.py`` (used only for multimodal inputs)
   and ``peft`` in ``skyrl/tx/utils/models.py`` (only ``peft.LoraConfig(...)
   .save_pretrained`` to write ``adapter_config.json`` next to a LoRA export). ``peft``
   pulls torch, and on Python 3.12 PyPI only has the CUDA torch build (about 6.7 GB with
   its nvidia libraries). Those two skyrl modules are imported with small stand-in
   ``torch`` / ``peft`` modules in ``sys.modules``, removed again right after, so nothing
   else sees a torch (transformers has already decided it has none). A multimodal request
   fails with a clear message; the stand-in ``LoraConfig`` writes the same
   ``adapter_config.json`` fields peft would. The API server imports only the first of
   the two (through ``skyrl.tinker.extra``): the second pulls JAX and flax, about 1.2 s
   of CPU at each server start that the API process never uses.
2. **No ``uv run``** (:func:`api`). The API server builds the engine command as ``uv run
   ... -m skyrl.tinker.engine`` from its parent's command line and refuses to start
   otherwise; that one function is replaced so the engine runs with the same
   interpreter (through this launcher again). The rest of :func:`api` is skyrl's
   ``skyrl/tinker/api.py`` ``__main__`` block, plus a listening socket piexp hands over.
3. **No orphans** (:func:`die_with_parent`). Each server process asks the kernel for
   SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), so killing piexp (even with
   SIGKILL) takes the API server and its engine with it.

Runs in the server venv without piexp (written out by piexp/service/compat/launcher.py).
"""

import ctypes
import json
import os
import signal
import sys
import types


def die_with_parent():
    # PR_SET_PDEATHSIG = 1: SIGKILL this process when its parent dies.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    expected = os.environ.get("PIEXP_SERVER_PARENT_PID")
    if expected and os.getppid() != int(expected):
        sys.exit("piexp launcher: parent exited before the server started")


def import_without_torch(role):
    # The installed skyrl's release and every name used here were checked before the
    # server started (piexp/service/compat/pins.py).
    import transformers.utils.import_utils as import_utils

    if import_utils.is_torch_available():
        return  # a real torch is installed: nothing to stand in for
    torch = types.ModuleType("torch")

    class Tensor:  # never an instance of anything the server receives
        pass

    def cat(*_args, **_kwargs):
        raise NotImplementedError("multimodal inputs need torch, which piexp's CPU server venv omits")

    torch.__dict__.update(Tensor=Tensor, cat=cat)
    peft = types.ModuleType("peft")

    class LoraConfig:
        def __init__(self, base_model_name_or_path=None, r=8, lora_alpha=8, **extra):
            self.fields = dict(
                base_model_name_or_path=base_model_name_or_path,
                r=r,
                lora_alpha=lora_alpha,
                peft_type="LORA",
                task_type="CAUSAL_LM",
                target_modules=None,
                lora_dropout=0.0,
                bias="none",
                inference_mode=True,
                **extra,
            )

        def save_pretrained(self, directory, **_kwargs):
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(str(directory), "adapter_config.json"), "w") as handle:
                json.dump(self.fields, handle, indent=2)

    peft.__dict__.update(LoraConfig=LoraConfig)
    saved = {name: sys.modules.get(name) for name in ("torch", "peft")}
    sys.modules.update(torch=torch, peft=peft)
    try:
        import skyrl.backends.renderer  # noqa: F401  (binds the stand-in torch)

        if role == "engine":
            import skyrl.tx.utils.models  # noqa: F401  (binds the stand-in peft)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def engine():
    import runpy

    runpy.run_module("skyrl.tinker.engine", run_name="__main__", alter_sys=True)


def api(launcher_path):
    import argparse

    import uvicorn
    from skyrl.tinker import api
    from skyrl.tinker.config import EngineConfig, add_model, config_to_argv

    # Item 2: the engine runs with this interpreter (through this launcher), not `uv run`.
    def engine_command(_parent_cmd, engine_config):
        return [sys.executable, launcher_path, "engine", *config_to_argv(engine_config)]

    api._build_uv_run_cmd_engine = engine_command
    # The same start-up as skyrl/tinker/api.py's __main__ block (skyrl __SKYRL_VERSION__).
    parser = argparse.ArgumentParser(description="SkyRL tinker API server (piexp launcher)")
    add_model(parser, EngineConfig)
    parser.add_argument("--host", type=str, default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    # A socket piexp bound and listens on before starting us: no window in which another
    # process could take the port (or answer piexp's readiness probe in our stead).
    parser.add_argument("--listen-fd", type=int, default=None)
    args = parser.parse_args()
    engine_config = EngineConfig.model_validate({k: v for k, v in vars(args).items() if k in EngineConfig.model_fields})
    api.app.state.engine_config = engine_config
    config = uvicorn.Config(
        api.app,
        host=args.host,
        port=args.port,
        log_config=api.get_uvicorn_log_config(),
        backlog=api.SKYRL_HTTP_CONNECTION_LIMIT,
        timeout_keep_alive=api.HTTP_KEEP_ALIVE_TIMEOUT_SECONDS,
    )
    sockets = None
    if args.listen_fd is not None:
        import socket

        sockets = [socket.socket(fileno=args.listen_fd)]
    uvicorn.Server(config).run(sockets=sockets)


def main(launcher_path, apply_engine_patches):
    """The server process's start: ``sys.argv[1]`` is its role (``api`` or ``engine``)."""
    role = sys.argv.pop(1)
    die_with_parent()
    os.environ["PIEXP_SERVER_PARENT_PID"] = str(os.getpid())  # the engine's parent is us
    import_without_torch(role)
    if role == "engine":
        apply_engine_patches()
        engine()
    elif role == "api":
        api(launcher_path)
    else:
        sys.exit(f"piexp launcher: unknown role {role!r}")
