"""``neuroncc compile A.pt2 B.pt2 DIR --jobs N``: many programs precompiled in worker processes (real processes,
as a user runs it), into the local cache and the remote tier."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from cli_testing import process_environment, run_process

sys.path.insert(0, str(Path(__file__).parents[1] / "driver"))
from redis_testing import redis_server  # noqa: E402  (tests/driver's real redis-server helper)

SECRET = "0123456789abcdef0123456789abcdef"


def _programs(tmp_path, *pt2s) -> Path:
    """A directory holding copies of the programs, one of them in a subdirectory, plus a file that is no .pt2."""
    directory = tmp_path / "programs"
    (directory / "more").mkdir(parents=True)
    for index, pt2 in enumerate(pt2s):
        shutil.copy(pt2, (directory / "more" if index else directory) / pt2.name)
    (directory / "broken.pt2").write_text("not an archive")
    return directory


def test_precompile_a_directory_in_parallel_then_everything_hits(good_pt2, norm_pt2, tmp_path):
    programs = _programs(tmp_path, good_pt2, norm_pt2)
    cache = tmp_path / "cache"
    first = run_process("compile", str(programs), "--jobs", "2", "--json", "--target", "interp", cwd=tmp_path,
                        home=tmp_path, cache=cache)
    assert first.returncode == 2, first.stderr  # one program failed; the others were compiled all the same
    report = json.loads(first.stdout)
    assert (report["programs"], report["failed"], report["graphs"], report["compiles"], report["jobs"]) == \
        (3, 1, 2, 2, 2)
    (failed,) = [r for r in report["results"] if not r["ok"]]
    assert failed["model"].endswith("broken.pt2") and "not a .pt2 archive" in failed["error"]
    names = sorted(g["name"] for r in report["results"] if r["ok"] for g in r["graphs"])
    assert names == ["norm", "small"]
    # the progress lines on stderr (not a terminal: one per finished program)
    lines = [line for line in first.stderr.splitlines() if line.startswith("neuroncc: [")]
    assert sorted(line.split("]")[0] for line in lines) == ["neuroncc: [1/3", "neuroncc: [2/3", "neuroncc: [3/3"]
    assert any("FAILED" in line and "broken.pt2" in line for line in lines)

    (programs / "broken.pt2").unlink()
    second = run_process("compile", str(programs / "small.pt2"), str(programs / "more"), "-j", "2",
                         "--target", "interp", cwd=tmp_path, home=tmp_path, cache=cache)
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("2 programs, 2 graphs: 0 compiled, 2 cache hits, 0 failed;")


def test_precompiled_programs_reach_another_machine_through_the_remote_tier(good_pt2, tmp_path, monkeypatch):
    with redis_server(tmp_path / "redis") as server:
        remote = {"NEURONCC_REMOTE_CACHE": server.url, "NEURONCC_REMOTE_CACHE_KEY": SECRET}
        environment = process_environment

        def with_remote(home, cache):
            return {**environment(home, cache), **remote}

        monkeypatch.setattr(sys.modules["cli_testing"], "process_environment", with_remote)
        first = run_process("compile", str(good_pt2), "--jobs", "1", "--json", cwd=tmp_path, home=tmp_path,
                            cache=tmp_path / "machine-a")
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout)["compiles"] == 1
        # another machine: an empty local cache, the same server; the plain single-program command
        second = run_process("compile", str(good_pt2), "--json", cwd=tmp_path, home=tmp_path,
                             cache=tmp_path / "machine-b")
        assert second.returncode == 0, second.stderr
        (graph,) = json.loads(second.stdout)["graphs"]
        assert graph["cache"] == "hit" and (tmp_path / "machine-b" / "entries" / graph["key"]).is_dir()
