"""CI's slice of the differential fuzzer: a fixed seed's programs, every available target, fwd + bwd.

A failure names the programs; reproduce, shrink and write regression tests with
``python tools/fuzz.py --seed 0 --n 200`` (it writes tests/fuzz/regressions/).
"""

import pytest

from neuroncc.testing.fuzz import check_program, generate_program
from neuroncc.testing.fuzz_campaign import available_targets

SEED = 0
# programs 0..79, in chunks so that pytest-xdist can spread them (~1.6 s a program on 2 cores: CI's budget)
CHUNKS, PER_CHUNK = 4, 20
TARGETS = tuple(available_targets()[0])


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_programs_match_eager(chunk):
    bugs = []
    for index in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK):
        program = generate_program(SEED, index)
        for finding in check_program(program, TARGETS):
            if finding.is_bug:
                bugs.append(f"program {index} on {finding.target}: {finding.status} ({finding.phase}) "
                            f"{finding.detail}\n{program.source()}")
    assert not bugs, (f"{len(bugs)} fuzz failures; shrink them into tests/fuzz/regressions/ with "
                      f"`python tools/fuzz.py --seed {SEED} --n {CHUNKS * PER_CHUNK}`:\n\n" + "\n".join(bugs))
