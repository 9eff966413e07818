"""Fetch the pinned Kotlin compiler and build the class path the ``kotlinc`` check uses.

``python -m device_bridge.kotlinc`` (run by ``make setup``) does, without root:

1. the compiler: JetBrains' distribution as published on the npm registry, package
   ``kotlin-compiler@2.0.21`` (the Kotlin version of ``gradle-workspace``), fetched with
   ``npm pack``, checked against the pinned sha512 integrity and sha256, unpacked into the
   cache (``$DROIDWIRE_CACHE_DIR``, else ``$XDG_CACHE_HOME/droidwire``, else
   ``~/.cache/droidwire``);
2. JUnit 4.13.2 and Hamcrest 2.2, the real jars: from ``/usr/share/java`` when Debian's
   ``junit4`` / ``libhamcrest-java`` are installed, else ``apt-get download`` of those two
   packages into the cache (no root needed; apt checks them against the signed archive);
3. the class path (:func:`ensure_layout`): the signature stubs of ``gradle-workspace/stubs``
   (Android platform and androidx.test in Java, the Kotlin-only ktx / coroutines-test entry
   points in Kotlin) compiled with ``javac`` and the compiler, and the warm compiler's driver
   (``DroidwireKotlinc.java``) compiled with ``javac``. Keyed by a hash of every input, so a
   warm cache is a no-op and a changed stub rebuilds it.

Nothing here is fatal for ``make setup``: an unreachable registry or a missing JDK is said
once and the bridge falls back to the simulated toolchain (exit status 0; ``--strict`` makes
it 1).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "KOTLIN_VERSION",
    "Layout",
    "SetupError",
    "cache_dir",
    "compiler_dir",
    "ensure_compiler",
    "ensure_layout",
    "find_java",
    "main",
]

log = logging.getLogger("droidwire.kotlinc.install")

KOTLIN_VERSION = "2.0.21"
NPM_PACKAGE = f"kotlin-compiler@{KOTLIN_VERSION}"
# The npm registry's integrity for kotlin-compiler-2.0.21.tgz, and our own sha256 of it.
NPM_INTEGRITY = (
    "sha512-au8JarUZNNrnY0QqXP62hyvKrgutLuF2qVpT4BXqy9lzDGKrRIePzPQMPq9hHLvNXIEK461AUuxNOyYkzAEO7g=="
)
TARBALL_SHA256 = "c3505a37d85df9c79a19857626f2144c2ce078a8e679f7b97850202a06182bd1"
# The compiler's own jars the driver JVM needs, and the runtime jars tests compile against.
COMPILER_JARS = (
    "kotlin-compiler.jar",
    "kotlin-stdlib.jar",
    "kotlin-script-runtime.jar",
    "kotlin-reflect.jar",
    "trove4j.jar",
    "annotations-13.0.jar",
    "kotlinx-coroutines-core-jvm.jar",
)
RUNTIME_JARS = ("kotlin-stdlib.jar", "kotlinx-coroutines-core-jvm.jar", "annotations-13.0.jar")
# Debian package → the jar it installs under /usr/share/java.
DEBIAN_JARS = {"junit4": "junit4.jar", "libhamcrest-java": "hamcrest-2.2.jar"}
SYSTEM_JAVA_DIR = Path("/usr/share/java")
LAYOUT_FORMAT = 1
_DRIVER = Path(__file__).with_name("DroidwireKotlinc.java")
_NPM_TIMEOUT_S = 300.0
_JAVAC_TIMEOUT_S = 300.0


class SetupError(Exception):
    """Something the kotlinc check needs is missing; the message says what and why."""


def cache_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if env.get("DROIDWIRE_CACHE_DIR"):
        return Path(env["DROIDWIRE_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base).expanduser() / "droidwire"


def compiler_dir(cache: Path) -> Path:
    """Where the unpacked distribution lives: ``<cache>/kotlinc/<version>/package``."""
    return cache / "kotlinc" / KOTLIN_VERSION / "package"


def find_java(env: dict[str, str] | None = None) -> tuple[Path, Path] | None:
    """``(java, javac)`` of a JDK (``JAVA_HOME`` first, then ``PATH``), or None."""
    env = dict(os.environ) if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        java, javac = Path(home) / "bin" / "java", Path(home) / "bin" / "javac"
        if java.is_file() and javac.is_file():
            return java, javac
    java_w = shutil.which("java", path=env.get("PATH"))
    javac_w = shutil.which("javac", path=env.get("PATH"))
    if java_w and javac_w:
        return Path(java_w), Path(javac_w)
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _integrity(path: Path) -> str:
    h = hashlib.sha512()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha512-" + base64.b64encode(h.digest()).decode()


def compiler_ok(cache: Path) -> bool:
    stamp = compiler_dir(cache).parent / ".verified"
    lib = compiler_dir(cache) / "lib"
    try:
        return stamp.read_text().strip() == TARBALL_SHA256 and all(
            (lib / jar).is_file() for jar in COMPILER_JARS
        )
    except OSError:
        return False


def ensure_compiler(cache: Path, *, fetch: bool = True) -> Path:
    """The unpacked compiler's ``package`` directory; fetched with npm when missing."""
    if compiler_ok(cache):
        return compiler_dir(cache)
    if not fetch:
        raise SetupError(
            f"the Kotlin compiler {KOTLIN_VERSION} is not in {cache} (run `make setup`)"
        )
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError("npm is not installed, so the Kotlin compiler cannot be fetched")
    target = compiler_dir(cache).parent
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        try:
            proc = subprocess.run(
                [npm, "pack", NPM_PACKAGE, "--silent", "--pack-destination", str(work)],
                cwd=work, capture_output=True, text=True, timeout=_NPM_TIMEOUT_S,
                stdin=subprocess.DEVNULL, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SetupError(f"npm pack {NPM_PACKAGE} failed: {exc}") from exc
        tarballs = list(work.glob("kotlin-compiler-*.tgz"))
        if proc.returncode != 0 or len(tarballs) != 1:
            why = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no tarball"]
            raise SetupError(f"npm pack {NPM_PACKAGE} failed (registry unreachable?): {why[0]}")
        tarball = tarballs[0]
        integrity, digest = _integrity(tarball), _sha256(tarball)
        if integrity != NPM_INTEGRITY or digest != TARBALL_SHA256:
            raise SetupError(
                f"{tarball.name} does not match its pinned hash (sha256 {digest}); refused"
            )
        unpack = work / "unpacked"
        with tarfile.open(tarball, "r:gz") as tar:
            tar.extractall(unpack, filter="data")
        for script in (unpack / "package" / "bin").glob("*"):
            script.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        unpack.rename(target)
    (target / ".verified").write_text(TARBALL_SHA256 + "\n")
    log.info("Kotlin compiler %s installed in %s", KOTLIN_VERSION, target)
    return compiler_dir(cache)


def _debian_jars(cache: Path, *, fetch: bool) -> dict[str, Path]:
    """JUnit 4 and Hamcrest: the system's jars, else the ones fetched into the cache."""
    out: dict[str, Path] = {}
    deps = cache / "kotlinc" / "deps"
    for package, jar in DEBIAN_JARS.items():
        for candidate in (SYSTEM_JAVA_DIR / jar, deps / jar):
            if candidate.is_file():
                out[package] = candidate
                break
    missing = [p for p in DEBIAN_JARS if p not in out]
    if not missing:
        return out
    if not fetch:
        raise SetupError(f"missing jars of Debian's {', '.join(missing)} (run `make setup`)")
    apt = shutil.which("apt-get")
    dpkg = shutil.which("dpkg-deb")
    if apt is None or dpkg is None:
        raise SetupError(f"no apt-get/dpkg-deb to fetch Debian's {', '.join(missing)}")
    deps.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=deps, prefix=".fetch-") as tmp:
        try:
            subprocess.run(
                [apt, "download", "-q", *missing], cwd=tmp, capture_output=True, text=True,
                timeout=_NPM_TIMEOUT_S, check=True, stdin=subprocess.DEVNULL,
            )
            for deb in Path(tmp).glob("*.deb"):
                subprocess.run(
                    [dpkg, "-x", str(deb), str(Path(tmp) / "x")], capture_output=True,
                    timeout=_NPM_TIMEOUT_S, check=True,
                )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SetupError(f"apt-get download {' '.join(missing)} failed: {exc}") from exc
        for package in missing:
            fetched = Path(tmp) / "x" / "usr" / "share" / "java" / DEBIAN_JARS[package]
            if not fetched.is_file():
                raise SetupError(f"{package} did not contain {DEBIAN_JARS[package]}")
            shutil.copyfile(fetched.resolve(), deps / DEBIAN_JARS[package])
            out[package] = deps / DEBIAN_JARS[package]
    return out


@dataclass(frozen=True)
class Layout:
    """Everything the warm compiler and the check need, all under the cache."""

    root: Path  # <cache>/kotlinc/cp-<hash>
    java: Path
    compiler_lib: Path
    driver: Path  # directory with DroidwireKotlinc.class
    stubs_java: Path
    stubs_kotlin: Path
    junit: Path
    hamcrest: Path
    stub_classes: int

    @property
    def compiler_classpath(self) -> list[Path]:
        return [self.compiler_lib / jar for jar in COMPILER_JARS] + [self.driver]

    @property
    def test_classpath(self) -> list[Path]:
        """What a generated test compiles against (the app's own classes come on top)."""
        return [
            *(self.compiler_lib / jar for jar in RUNTIME_JARS),
            self.junit,
            self.hamcrest,
            self.stubs_java,
            self.stubs_kotlin,
        ]


def stubs_dir() -> Path:
    from device_bridge.workspace_template import template_dir

    return Path(template_dir()) / "stubs"


def _inputs_hash(stubs: Path, jars: dict[str, Path], java: Path) -> str:
    h = hashlib.sha256(f"{LAYOUT_FORMAT}\0{KOTLIN_VERSION}\0{java.resolve()}\0".encode())
    for path in sorted([*stubs.rglob("*.java"), *stubs.rglob("*.kt")]):
        h.update(str(path.relative_to(stubs)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(_DRIVER.read_bytes())
    for name in sorted(jars):
        h.update(f"{name}\0{_sha256(jars[name])}\0".encode())
    return h.hexdigest()[:20]


def _javac(javac: Path, out: Path, classpath: list[Path], sources: list[Path]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        str(javac), "-nowarn", "-encoding", "UTF-8", "--release", "17", "-d", str(out),
        "-cp", os.pathsep.join(map(str, classpath)), *map(str, sources),
    ]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=_JAVAC_TIMEOUT_S, check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise SetupError(f"javac failed on {sources[0].parent}: {proc.stderr.strip()[:2000]}")


def ensure_layout(
    cache: Path | None = None, *, fetch: bool = False, env: dict[str, str] | None = None
) -> Layout:
    """The class path, built when missing or stale (``fetch``: also download what is missing).

    Raises :class:`SetupError` with what is missing (a JDK, the compiler, the jars)."""
    cache = cache_dir(env) if cache is None else cache
    jdk = find_java(env)
    if jdk is None:
        raise SetupError("no JDK (java and javac; Debian: openjdk-17-jdk-headless)")
    java, javac = jdk
    package = ensure_compiler(cache, fetch=fetch)
    jars = _debian_jars(cache, fetch=fetch)
    stubs = stubs_dir()
    key = _inputs_hash(stubs, jars, java)
    root = cache / "kotlinc" / f"cp-{key}"
    layout = Layout(
        root=root, java=java, compiler_lib=package / "lib", driver=root / "driver",
        stubs_java=root / "stubs-java", stubs_kotlin=root / "stubs-kotlin",
        junit=jars["junit4"], hamcrest=jars["libhamcrest-java"], stub_classes=0,
    )
    done = root / "layout.json"
    if done.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError):
            return _with_count(layout, int(json.loads(done.read_text())["stub_classes"]))
    root.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".cp-{key}-"))
    try:
        staged = _with_root(layout, build)
        _javac(javac, staged.driver, [package / "lib" / "kotlin-compiler.jar",
                                      package / "lib" / "kotlin-stdlib.jar"], [_DRIVER])
        _javac(javac, staged.stubs_java, [layout.junit, layout.hamcrest],
               sorted((stubs / "java").rglob("*.java")))
        _compile_kotlin_stubs(staged, stubs)
        count = sum(1 for _ in staged.stubs_java.rglob("*.class")) + sum(
            1 for _ in staged.stubs_kotlin.rglob("*.class")
        )
        (build / "layout.json").write_text(json.dumps({"stub_classes": count, "key": key}))
        if not done.is_file():  # else another process built the same inputs meanwhile
            if root.exists():
                shutil.rmtree(root)  # a half-built leftover (no layout.json)
            build.rename(root)
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)
    _prune(root)
    log.info("kotlinc class path built in %s", root)
    return _with_count(layout, count)


def _with_root(layout: Layout, root: Path) -> Layout:
    return Layout(
        root=root, java=layout.java, compiler_lib=layout.compiler_lib, driver=root / "driver",
        stubs_java=root / "stubs-java", stubs_kotlin=root / "stubs-kotlin",
        junit=layout.junit, hamcrest=layout.hamcrest, stub_classes=layout.stub_classes,
    )


def _with_count(layout: Layout, count: int) -> Layout:
    from dataclasses import replace

    return replace(layout, stub_classes=count)


def _compile_kotlin_stubs(layout: Layout, stubs: Path) -> None:
    from .service import WarmCompiler

    sources = sorted((stubs / "kotlin").rglob("*.kt"))
    layout.stubs_kotlin.mkdir(parents=True, exist_ok=True)
    compiler = WarmCompiler(layout, max_heap_mb=768)
    try:
        classpath = [p for p in layout.test_classpath if p != layout.stubs_kotlin]
        run = compiler.compile(
            [*base_args(), "-module-name", "droidwire_stubs", "-cp",
             os.pathsep.join(map(str, classpath)), "-d", str(layout.stubs_kotlin),
             *map(str, sources)],
            timeout_s=_JAVAC_TIMEOUT_S,
        )
    finally:
        compiler.close()
    if run.exit_code != 0:
        raise SetupError(f"the Kotlin stubs do not compile:\n{run.output[:4000]}")


def base_args() -> list[str]:
    """kotlinc options every compile shares: the JDK 17 API (``java.*``), no implicit stdlib
    (it is on the class path explicitly), JVM target 17 as in ``app/build.gradle.kts``."""
    return ["-no-stdlib", "-no-reflect", "-jvm-target", "17", "-Xjdk-release=17", "-nowarn"]


def _prune(keep: Path, limit: int = 3) -> None:
    """Keep the newest ``limit`` class paths (a changed stub builds a new one)."""
    olds = sorted(
        (p for p in keep.parent.glob("cp-*") if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime, reverse=True,
    )
    for old in olds[limit - 1:]:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m device_bridge.kotlinc",
        description="Fetch the pinned Kotlin compiler and build the kotlinc check's class path.",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when anything is missing")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        layout = ensure_layout(args.cache_dir, fetch=True)
    except (SetupError, OSError, subprocess.SubprocessError, tarfile.TarError) as exc:
        print(
            f"kotlinc: not set up ({exc}); the bridge falls back to the simulated toolchain",
            file=sys.stderr,
        )
        return 1 if args.strict else 0
    print(f"kotlinc {KOTLIN_VERSION}: ready ({layout.stub_classes} stub classes, {layout.root})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
