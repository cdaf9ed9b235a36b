"""LLVM's answer about the host CPU, remembered in the cache directory (neuroncc/driver/host_stamp.py): a second
process takes it from the file without loading llvmlite's library; another CPU identity (another model, other
flags, another LLVM) misses; a damaged or tampered file is ignored and rewritten."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuroncc.driver import host_stamp
from neuroncc.driver.source_digest import read_checked
from neuroncc.hardware import host

PROBE = """
import json, sys
from pathlib import Path
from neuroncc.driver.host_stamp import remembered_host_cpu
cpu = remembered_host_cpu(Path(sys.argv[1]))
with open("/proc/self/maps") as maps:
    mapped = "libllvmlite" in maps.read()
print(json.dumps({"fingerprint": cpu.fingerprint, "llvm_mapped": mapped}))
"""

CPUINFO = """processor\t: {n}
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
cpu MHz\t\t: {mhz}
core id\t\t: {n}
flags\t\t: fpu sse2 avx avx2 fma{extra}

"""


def _probe(root: Path) -> dict:
    run = subprocess.run([sys.executable, "-c", PROBE, str(root)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(host.llvm_host_identity() is None or not Path("/proc/self/maps").exists(),
                    reason="no /proc/cpuinfo or llvmlite library: LLVM is asked every time")
def test_a_second_process_takes_the_answer_from_the_file_without_loading_llvm(tmp_path):
    first = _probe(tmp_path)
    assert first["llvm_mapped"]  # the check below is real: asking LLVM maps its library
    assert len(list((tmp_path / "source").glob("host-*.json"))) == 1
    second = _probe(tmp_path)
    assert second == {"fingerprint": first["fingerprint"], "llvm_mapped": False}
    assert second["fingerprint"] == host.host_cpu().fingerprint  # the answer this process asked LLVM for


TARGET_PROBE = PROBE.replace("remembered_host_cpu", "remembered_target_cpu")


@pytest.mark.skipif(host.llvm_host_identity() is None or not Path("/proc/self/maps").exists(),
                    reason="no /proc/cpuinfo or llvmlite library: LLVM is asked every time")
def test_a_named_cpus_features_are_remembered_too(tmp_path):
    """NEURONCC_CPU: LLVM's features of the named CPU stamped beside the host's, so a second process (a warm
    start's cache hits) neither loads LLVM nor probes; the same fingerprint either way."""
    import os

    from neuroncc.hardware.named_cpu import llvm_cpu_features, missing_features

    name = "x86-64-v2"
    if missing_features(llvm_cpu_features(name, host.host_cpu().features), host.host_cpu().features):
        pytest.skip(f"this host cannot run {name}'s code")
    env = dict(os.environ, NEURONCC_CPU=name)

    def probe() -> dict:
        run = subprocess.run([sys.executable, "-c", TARGET_PROBE, str(tmp_path)], capture_output=True, text=True,
                             timeout=120, env=env)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout.strip().splitlines()[-1])

    first = probe()
    assert first["llvm_mapped"] and f" {name}(named) " in first["fingerprint"]
    (stamp,) = (tmp_path / "source").glob(f"cpu-*-{name}.json")
    second = probe()
    assert second == {"fingerprint": first["fingerprint"], "llvm_mapped": False}
    # a stamp of another host's features is not taken (the name's features are asked again, and stamped anew)
    fields = read_checked(stamp)
    fields["host_features"] = "+sse2"
    from neuroncc.driver.source_digest import write_checked

    write_checked(stamp, {k: v for k, v in fields.items() if k != "checksum"})
    third = probe()
    assert third["llvm_mapped"] and third["fingerprint"] == first["fingerprint"]


@pytest.fixture
def fresh_host(monkeypatch, tmp_path):
    """No CPU read yet in this process; LLVM's answers counted (a made-up CPU per identity)."""
    monkeypatch.setattr(host, "_HOST", [])
    identity, asked = ["a" * 64], []

    def llvm_host():
        asked.append(identity[0])
        return f"cpu-{identity[0][:4]}", "+avx2,-avx512f", "x86_64-unknown-linux-gnu"

    monkeypatch.setattr(host_stamp, "llvm_host", llvm_host)
    monkeypatch.setattr(host_stamp, "llvm_host_identity", lambda: identity[0])

    def ask(new_identity: str | None = None):
        monkeypatch.setattr(host, "_HOST", [])  # a new process
        identity[0] = new_identity or identity[0]
        return host_stamp.remembered_host_cpu(tmp_path).name

    return ask, asked, identity


def test_the_answer_is_kept_per_cpu_identity(fresh_host, tmp_path):
    ask, asked, _ = fresh_host
    assert ask() == "cpu-aaaa" and asked == ["a" * 64]
    assert ask() == "cpu-aaaa" and len(asked) == 1  # from the file
    assert ask("b" * 64) == "cpu-bbbb" and len(asked) == 2  # another CPU (or LLVM) sharing the directory: asked
    assert ask("a" * 64) == "cpu-aaaa" and len(asked) == 2  # each keeps its own answer
    assert ask("a" * 16 + "c" * 48) == "cpu-aaaa" and len(asked) == 3  # same file name, other identity: asked
    assert ask() == "cpu-aaaa" and len(asked) == 3


@pytest.mark.parametrize("damage", ["garbage", "truncated", "tampered", "other version"])
def test_a_damaged_file_is_ignored_and_rewritten(fresh_host, tmp_path, damage):
    ask, asked, identity = fresh_host
    ask()
    path = host_stamp.stamp_path(tmp_path, identity[0])
    text = path.read_text()
    fields = json.loads(text)
    damaged = {"garbage": "\x00not json", "truncated": text[:len(text) // 2],
               "tampered": json.dumps({**fields, "features": "+avx512f"}),
               "other version": json.dumps({**fields, "version": 0})}[damage]
    path.write_text(damaged)
    assert ask() == "cpu-aaaa" and len(asked) == 2  # asked again
    assert read_checked(path) == {k: v for k, v in fields.items() if k != "checksum"}  # and rewritten
    assert ask() == "cpu-aaaa" and len(asked) == 2


def test_without_a_stamp_root_or_identity_llvm_is_asked(fresh_host, monkeypatch, tmp_path):
    ask, asked, _ = fresh_host
    monkeypatch.setattr(host, "_HOST", [])
    monkeypatch.setattr(host_stamp, "_STAMP_ROOT", [])
    host_stamp.remembered_host_cpu()
    monkeypatch.setattr(host, "_HOST", [])
    monkeypatch.setattr(host_stamp, "llvm_host_identity", lambda: None)  # no /proc/cpuinfo
    host_stamp.remembered_host_cpu(tmp_path)
    assert len(asked) == 0  # both went to host_cpu(), which asks LLVM itself
    assert not (tmp_path / "source").exists()


def test_the_identity_follows_the_cpu_model_and_flags_not_its_clock_or_other_cores(tmp_path):
    if host.llvm_host_identity() is None:
        pytest.skip("llvmlite's library not found")

    def identity(*blocks: tuple[int, str, str]) -> str | None:
        path = tmp_path / "cpuinfo"
        path.write_text("".join(CPUINFO.format(n=n, mhz=mhz, extra=extra) for n, mhz, extra in blocks))
        return host.llvm_host_identity(path)

    avx2 = identity((0, "2445.404", ""), (1, "2445.404", ""))
    assert avx2 is not None
    assert identity((0, "3100.000", ""), (1, "1800.0", " avx512f")) == avx2  # clock, a later block: the same
    assert identity((0, "2445.404", " avx512f avx512bw")) != avx2  # an AVX-512 host never reads AVX2's answer
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(n=0, mhz="1", extra="").replace("model\t\t: 1\n", "model\t\t: 17\n"))
    assert host.llvm_host_identity(path) != avx2
    assert host.llvm_host_identity(tmp_path / "absent") is None  # not Linux: LLVM is asked


def test_a_process_that_asked_llvm_stamps_a_directory_without_a_stamp(fresh_host, monkeypatch, tmp_path):
    """A compile asks LLVM before its cache directory exists (a cold process's first lookup); once the directory
    is there, LLVM's answer is stamped, so the next process's graph cache hit does not load LLVM."""
    ask, asked, identity = fresh_host
    monkeypatch.setattr(host, "_ASKED", [])
    monkeypatch.setattr(host_stamp, "_STAMPED", set())
    monkeypatch.setattr(host, "llvm_host", lambda: ("cpu-llvm", "+avx2,-avx512f", "x86_64-unknown-linux-gnu"))
    assert host.host_cpu().name == "cpu-llvm"  # asked in this process, before any stamp root
    assert host_stamp.remembered_host_cpu(tmp_path).name == "cpu-llvm"
    assert ask() == "cpu-llvm" and asked == []  # the next process reads the stamp


def test_a_cpu_put_in_place_of_llvms_answer_is_never_stamped(fresh_host, monkeypatch, tmp_path):
    ask, asked, identity = fresh_host
    monkeypatch.setattr(host, "_ASKED", [])
    monkeypatch.setattr(host_stamp, "_STAMPED", set())
    monkeypatch.setattr(host, "_HOST", [host.HostCpu(name="pinned", features="+avx2", triple="x86_64-unknown-linux-gnu")])
    assert host_stamp.remembered_host_cpu(tmp_path).name == "pinned"
    assert not host_stamp.stamp_path(tmp_path, identity[0]).exists()
    assert ask() == "cpu-aaaa" and len(asked) == 1  # the next process asks LLVM
