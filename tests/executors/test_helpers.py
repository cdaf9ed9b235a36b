"""The launcher's process-wide helpers (team entry, sequence interpreter) taken from a loaded artifact.

Each case runs in a fresh process (the helpers are loaded once per process): a saved artifact carries the
helpers' code (a shared library each, or object files where no linker was found), and a process that loads it runs its kernels without compiling them; an offer whose
IR differs, or a damaged runtime.json, is ignored and the helpers are compiled as before.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neuroncc.executors.cpu import helpers

CHILD = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    import numpy as np
    from neuroncc.codegen.llvm import jit
    from neuroncc.driver.artifact import ARTIFACT_CODECS, read_artifact
    from neuroncc.executors.cpu import helpers, native_sequence, threads

    compiled = []
    real = jit.compile_ir
    jit.compile_ir = lambda texts, *a, **k: compiled.append(len(texts)) or real(texts, *a, **k)
    manifest, exe = read_artifact(Path(sys.argv[1]), ARTIFACT_CODECS["cpu"])
    threads.team_entry(); native_sequence.interpreter()
    x = np.arange(2 * 2048, dtype=np.float32).reshape(2, 2048) / 1000
    out = exe(x)[0]
    print(json.dumps({"compiled": len(compiled), "result": out.tolist()}))
''')


def _save_artifact(root: Path) -> Path:
    """The artifact of a small graph of native kernels, compiled in this process into a cache under ``root``."""
    from neuroncc.driver.cache import CompileCache
    from neuroncc.driver.compile import compile_graph
    from neuroncc.ir import Builder, DType, TensorType

    b = Builder("g")
    x = b.param(TensorType((2, 2048), DType.f32), "x")
    compile_graph(b.build([b.op("add", b.op("tanh", x), x)]), target="cpu", cache=CompileCache(root / "cache"))
    (directory,) = (root / "cache" / "entries").iterdir()
    return directory


def _child(directory: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(directory)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _rewrite(directory: Path, text: str) -> None:
    """Replace runtime.json and re-record it in the manifest (a well-formed artifact with this content)."""
    from neuroncc.driver.artifact import file_digest, manifest_bytes, read_manifest

    (directory / helpers.RUNTIME_FILE).write_text(text)
    manifest = read_manifest(directory)
    files = {**manifest.files, helpers.RUNTIME_FILE: file_digest(directory / helpers.RUNTIME_FILE)}
    (directory / "manifest.json").write_bytes(manifest_bytes(dataclasses.replace(manifest, files=files)))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return _save_artifact(tmp_path_factory.mktemp("helpers"))


def test_an_artifact_carries_the_helpers_and_a_loading_process_compiles_nothing(artifact):
    data = json.loads((artifact / helpers.RUNTIME_FILE).read_text())
    assert set(data["helpers"]) == {helpers.TEAM, helpers.SEQUENCE}
    result = _child(artifact)
    assert result["compiled"] == 0
    import numpy as np

    x = np.arange(2 * 2048, dtype=np.float32).reshape(2, 2048) / 1000
    np.testing.assert_allclose(result["result"], np.tanh(x) + x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("damage", ["other IR", "bad base64", "unknown form", "not JSON", "other version"])
def test_unusable_helpers_are_compiled_instead(tmp_path, artifact, damage):
    import shutil

    directory = tmp_path / artifact.name
    shutil.copytree(artifact, directory)
    data = json.loads((directory / helpers.RUNTIME_FILE).read_text())
    if damage == "other IR":
        for entry in data["helpers"].values():
            entry["ir_sha256"] = "0" * 64
        text = json.dumps(data)
    elif damage == "bad base64":
        data["helpers"][helpers.TEAM]["code"] = "!!"
        text = json.dumps(data)
    elif damage == "unknown form":
        data["helpers"][helpers.TEAM]["form"] = "dll"
        text = json.dumps(data)
    elif damage == "not JSON":
        text = "{"
    else:
        data["version"] = 99
        text = json.dumps(data)
    _rewrite(directory, text)
    result = _child(directory)
    assert result["compiled"] == 2  # a malformed file is ignored as a whole


def test_offers_are_ignored_once_a_helper_is_loaded():
    helpers.helper_module(helpers.TEAM, lambda: _team_ir())
    before = helpers._MODULES[helpers.TEAM]
    fake = {"version": helpers.RUNTIME_VERSION, "helpers": {helpers.TEAM: {
        "ir_sha256": "0" * 64, "form": "shared-library", "code": base64.b64encode(b"x").decode()}}}
    helpers.offer(json.dumps(fake))
    assert helpers.TEAM not in helpers._OFFERED
    assert helpers.helper_module(helpers.TEAM, _team_ir) is before


def _team_ir() -> str:
    from neuroncc.codegen.llvm.team_entry import team_entry_ir

    return team_entry_ir()


RACE_CHILD = textwrap.dedent('''
    import json, threading, time
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.team_entry import team_entry_ir
    from neuroncc.executors.cpu import helpers

    compiled = []
    real = jit.compile_ir

    def slow(texts, *a, **k):  # the first thread is surely still compiling when the second one asks
        compiled.append(threading.current_thread().name)
        time.sleep(0.3)
        return real(texts, *a, **k)

    jit.compile_ir = slow
    got = {}
    first = threading.Thread(target=lambda: got.update(first=helpers.helper_module(helpers.TEAM, team_entry_ir)),
                             name="first")
    first.start()
    time.sleep(0.05)
    second = helpers.helper_module(helpers.TEAM, team_entry_ir)
    first.join()
    print(json.dumps({"compiled": compiled, "same": second is got["first"]}))
''')


def test_a_helper_another_thread_is_compiling_is_waited_for_not_compiled_again():
    # a graph's first call needs the team entry while the build's thread compiles it: compiling it twice took
    # the transformer block's first forward call ~10-19 ms (performance-history, session 18 coldllvm)
    out = subprocess.run([sys.executable, "-c", RACE_CHILD], check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"compiled": ["first"], "same": True}
