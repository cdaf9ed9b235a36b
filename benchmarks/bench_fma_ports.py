"""Which vector instructions share this core's FMA pipes: each instruction's cost beside eight independent FMAs.

A loop of 8 independent ``vfmadd231ps`` chains (8 x 4 cycles of latency: exactly the two FMA pipes' throughput on
Zen 3) is timed alone and with 4 (or 8) independent instances of one other instruction added per iteration. An
instruction that runs on other pipes adds nothing; one that needs an FMA pipe adds half a cycle each (4 of them:
+50%); one that runs on a pipe shared with the FMAs part of the time adds less. Session 28 softmax28 (Zen 3):
vmaxps, vaddps, vpaddd, vpminud, vcmpps, vandps and a vbroadcastss from memory add nothing; vmulps and vblendvps
+50% (the FMA pipes); vpslld and vpsrld +30%, vpackusdw +27%, vpshufb +30% (a pipe shared with one FMA pipe),
vpermq +115%, vcvtps2ph +92%; vpblendw, vpmaxuw, vpcmpeqw, vpsubw, vpor nothing. So softmax's exp loop needs the
FMA pipes for its FMAs and vmulps only: 44 per 32 elements with the fused write, 0.69 cycles an element (not 48 and
0.75: its clamp's vmaxps runs elsewhere).

Needs ``gcc`` (the loops are assembled as a shared library). 1 thread, the calling thread's CPU time, the fastest
of 5 rounds (a limit is what the machine reaches).

    /work/bin/heavy x python benchmarks/bench_fma_ports.py
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
import time
from pathlib import Path

FMAS = [f"vfmadd231ps %ymm15, %ymm14, %ymm{r}" for r in range(8)]
#: each probe: 4 independent instances on ymm8-11 (8 for "max8": two dependent per register)
PROBES = {
    "none": [],
    "vmaxps": [f"vmaxps %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vmaxps x8": [f"vmaxps %ymm15, %ymm{8 + r % 4}, %ymm{8 + r % 4}" for r in range(8)],
    "vaddps": [f"vaddps %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vmulps": [f"vmulps %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpslld": [f"vpslld $1, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpaddd": [f"vpaddd %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpminud": [f"vpminud %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vcmpltps": [f"vcmpltps %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vandps": [f"vandps %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vblendvps": [f"vblendvps %ymm13, %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vbroadcastss mem": [f"vbroadcastss (%rsi), %ymm{8 + r}" for r in range(4)],
    "vpsrld": [f"vpsrld $16, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpblendw": [f"vpblendw $170, %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpmaxuw": [f"vpmaxuw %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpcmpeqw": [f"vpcmpeqw %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpsubw": [f"vpsubw %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpor": [f"vpor %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpackusdw": [f"vpackusdw %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpermq": [f"vpermq $216, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vpshufb": [f"vpshufb %ymm15, %ymm{8 + r}, %ymm{8 + r}" for r in range(4)],
    "vcvtps2ph": [f"vcvtps2ph $0, %ymm{8 + r}, %xmm{8 + r}" for r in range(4)],
}


def _library(directory: Path) -> ctypes.CDLL:
    source = ["\t.text\n"]
    for k, probe in enumerate(PROBES.values()):
        body = "\n".join(f"\t{line}" for line in FMAS + probe)
        source.append(f"\t.globl probe{k}\nprobe{k}:\n\tvxorps %ymm14, %ymm14, %ymm14\n\tvxorps %ymm15, %ymm15, %ymm15\n"
                      f".Lloop{k}:\n{body}\n\tdecq %rdi\n\tjnz .Lloop{k}\n\tvzeroupper\n\tret\n")
    (directory / "probes.S").write_text("".join(source))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(directory / "probes.so"), str(directory / "probes.S")],
                   check=True, stderr=subprocess.DEVNULL)
    return ctypes.CDLL(str(directory / "probes.so"))


def main() -> None:
    iterations, scratch = 2_000_000, ctypes.create_string_buffer(64)
    with tempfile.TemporaryDirectory() as directory:
        lib = _library(Path(directory))
        best: dict[str, float] = {}
        for _ in range(5):
            for k, name in enumerate(PROBES):
                probe = getattr(lib, f"probe{k}")
                probe.argtypes = [ctypes.c_long, ctypes.c_void_p]
                start = time.thread_time_ns()
                probe(iterations, scratch)
                best[name] = min(best.get(name, float("inf")), (time.thread_time_ns() - start) / iterations)
    print(f"8 independent FMAs: {best['none']:.3f} ns an iteration (4 cycles at {4 / best['none']:.2f} GHz)")
    for name, ns in best.items():
        print(f"{name:18s} {ns:.3f} ns  {ns / best['none']:.3f}x")


if __name__ == "__main__":
    main()
