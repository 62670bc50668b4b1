"""An installed dstrain works as C, C++, Python and Debian users consume it:
`cmake --install` to a scratch prefix, the README's C example built against
it with pkg-config and with find_package, the installed CLI, the Python SDK
in a fresh venv; and the Debian package cpack makes, unpacked into a scratch
root. Nothing here sets LD_LIBRARY_PATH or DSTRAIN_* for the installed
programs: they must find their library themselves."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DSTRAIN_BUILD_DIR", os.path.join(ROOT, "build"))
EXAMPLE = os.path.join(ROOT, "examples", "c", "readme.c")


def header_version():
    parts = {}
    with open(os.path.join(ROOT, "capi", "include", "dstrain", "dstrain.h"), encoding="utf-8") as f:
        for line in f:
            for part in ("MAJOR", "MINOR", "PATCH"):
                if line.startswith(f"#define DST_VERSION_{part} "):
                    parts[part] = int(line.split()[2])
    return parts["MAJOR"], parts["MINOR"], parts["PATCH"]


VERSION = "%d.%d.%d" % header_version()


def clean_env(**extra):
    """The environment of a user who set nothing for dstrain."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DSTRAIN_") and k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH",
                                                         "CMAKE_PREFIX_PATH", "PYTHONPATH")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **extra)
    return env


def run(cmd, timeout=300, **kwargs):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert out.returncode == 0, f"{cmd} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    where = tmp_path_factory.mktemp("install") / "opt" / "dstrain"
    run(["cmake", "--install", BUILD, "--prefix", str(where)])
    return where


def run_readme_example(program, workdir):
    out = run([str(program)], cwd=workdir, env=clean_env())
    assert "step 19 loss" in out.stdout


def test_the_installed_cli_finds_its_library_and_plugins(prefix):
    out = run([str(prefix / "bin" / "dstrain"), "report"], env=clean_env())
    lib = os.path.realpath(prefix / "lib" / "libdstrain.so.0")
    assert lib in out.stdout or str(prefix / "lib") in out.stdout, out.stdout
    assert f"libdstrain {VERSION}" in out.stdout or VERSION in out.stdout
    plugin = os.path.realpath(prefix / "lib" / "dstrain" / "libdstrain_sentencepiece.so")
    assert f"{plugin} [FOUND]" in out.stdout, out.stdout  # what tokenizers open
    readelf = run(["readelf", "-d", str(prefix / "bin" / "dstrain")]).stdout
    assert "$ORIGIN/../lib" in readelf
    for plugin in ("libdstrain_nccl.so", "libdstrain_cuda.so"):
        if os.path.exists(os.path.join(BUILD, plugin)):  # built here: installed beside the library
            assert (prefix / "lib" / "dstrain" / plugin).exists(), plugin


def test_pkg_config_builds_the_readme_example(prefix, tmp_path):
    env = clean_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    assert run(["pkg-config", "--modversion", "dstrain"], env=env).stdout.strip() == VERSION
    flags = run(["pkg-config", "--cflags", "--libs", "dstrain"], env=env).stdout.split()
    libdir = run(["pkg-config", "--variable=libdir", "dstrain"], env=env).stdout.strip()
    assert os.path.realpath(libdir) == os.path.realpath(prefix / "lib")
    program = tmp_path / "readme"
    run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", EXAMPLE, "-o", str(program), *flags,
         f"-Wl,-rpath,{libdir}"], env=env)
    run_readme_example(program, tmp_path)


def cmake_project(tmp_path, version):
    source = tmp_path / f"project_{version.replace('.', '_')}"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\n"
        "project(uses_dstrain C)\n"
        f"find_package(dstrain {version} CONFIG REQUIRED)\n"
        "add_executable(readme readme.c)\n"
        "target_link_libraries(readme PRIVATE dstrain::dstrain)\n")
    shutil.copy(EXAMPLE, source / "readme.c")
    return source


def test_find_package_builds_the_readme_example(prefix, tmp_path):
    major, minor, _ = header_version()
    source = cmake_project(tmp_path, f"{major}.{minor}")
    build = source / "build"
    env = clean_env()
    run(["cmake", "-S", str(source), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"], env=env)
    run(["cmake", "--build", str(build)], env=env)
    run_readme_example(build / "readme", tmp_path)
    # A later minor version than installed, or another major, is refused by name.
    for wanted in (f"{major}.{minor + 1}", f"{major + 1}.0"):
        other = cmake_project(tmp_path, wanted)
        out = subprocess.run(["cmake", "-S", str(other), "-B", str(other / "build"),
                              f"-DCMAKE_PREFIX_PATH={prefix}"],
                             capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode != 0
        assert "dstrain" in out.stderr and VERSION in out.stderr, out.stderr


def test_the_python_sdk_in_a_fresh_venv_finds_the_installed_library(prefix, tmp_path):
    venv = tmp_path / "venv"
    # The venv sees Debian's cffi and numpy (no package index here).
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)])
    run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", "--quiet",
         str(prefix / "share" / "dstrain" / "sdk-python")], env=clean_env())
    script = "import dstrain, dstrain._lib as l; print(dstrain.version()); print(l.library_path)"
    out = run([str(venv / "bin" / "python"), "-c", script], env=clean_env(), cwd=tmp_path)
    version, path = out.stdout.split()
    assert version == VERSION
    assert os.path.realpath(path) == os.path.realpath(prefix / "lib" / "libdstrain.so.0")
    # Built from the source tree, the wheel records the library pkg-config knew.
    other = tmp_path / "venv_from_source"
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(other)])
    run([str(other / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", "--quiet",
         os.path.join(ROOT, "sdk-python")],
        env=clean_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig")))
    out = run([str(other / "bin" / "python"), "-c", script], env=clean_env(), cwd=tmp_path)
    assert os.path.realpath(out.stdout.split()[1]) == os.path.realpath(
        prefix / "lib" / "libdstrain.so.0")


def test_the_debian_package_declares_its_dependencies_and_runs_unpacked(tmp_path):
    if not shutil.which("dpkg-deb") or not shutil.which("dpkg-shlibdeps"):
        pytest.skip("dpkg-deb and dpkg-shlibdeps (dpkg-dev) make and read the package")
    out_dir = tmp_path / "package"
    run(["cpack", "-G", "DEB", "-B", str(out_dir), "--config",
         os.path.join(BUILD, "CPackConfig.cmake")], timeout=900, cwd=BUILD)
    debs = sorted(out_dir.glob("dstrain_*.deb"))
    assert len(debs) == 1, list(out_dir.iterdir())
    deb = str(debs[0])
    info = run(["dpkg-deb", "--field", deb, "Package", "Version", "Depends"]).stdout
    assert "Package: dstrain" in info and f"Version: {VERSION}" in info
    depends = info.split("Depends:", 1)[1]
    for needed in ("libc6", "libopenblas", "libgloo", "libcivetweb", "libdnnl"):
        assert needed in depends, depends
    contents = run(["dpkg-deb", "--contents", deb]).stdout
    for path in (f"./usr/lib/libdstrain.so.{VERSION}", "./usr/lib/libdstrain.so.0",
                 "./usr/lib/dstrain/libdstrain_sentencepiece.so", "./usr/bin/dstrain",
                 "./usr/include/dstrain/dstrain.h", "./usr/lib/pkgconfig/dstrain.pc",
                 "./usr/lib/cmake/dstrain/dstrainConfig.cmake",
                 "./usr/lib/cmake/dstrain/dstrainConfigVersion.cmake",
                 "./usr/share/dstrain/sdk-python/pyproject.toml"):
        assert path in contents, path
    root = tmp_path / "root"
    run(["dpkg-deb", "-x", deb, str(root)])
    report = run([str(root / "usr" / "bin" / "dstrain"), "report"], env=clean_env()).stdout
    assert str(root / "usr" / "lib") in report or VERSION in report
