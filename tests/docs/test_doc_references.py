"""The docs' map stays true: docs/architecture.md names every package in its layer, and every repository path or
``neuroncc.x.y`` name that README.md and docs/*.md give exists (tests/docs/doc_references.py says what is read)."""

from __future__ import annotations

import textwrap

import pytest
from doc_references import (
    ARCHITECTURE,
    ROOT,
    architecture_problems,
    checked_pages,
    checked_text,
    layering_rules,
    problems_of,
    references,
    source_packages,
    top_level_modules,
    unranked_layers,
)

PAGES = {path.relative_to(ROOT).as_posix(): checked_text(path) for path in checked_pages()}


def test_architecture_names_every_package_in_its_layer():
    problems = architecture_problems(ARCHITECTURE.read_text(encoding="utf-8"), source_packages(), top_level_modules(),
                                     layering_rules()["LAYERS"], unranked_layers())
    assert not problems, "docs/architecture.md and the tree differ:\n" + "\n".join(problems)


def test_architecture_states_the_torch_rule_of_the_layering_test():
    """"Nothing below the front end imports torch at module level" is TORCH_FREE: errors and every lower rank."""
    rules = layering_rules()
    below_the_front_end = {name for name, rank in rules["LAYERS"].items() if rank < rules["LAYERS"]["frontend"]}
    assert rules["TORCH_FREE"] == rules["BASE"] | below_the_front_end
    text = " ".join(ARCHITECTURE.read_text(encoding="utf-8").split())
    assert "Nothing below the front end (nor the package's `__init__.py`) imports torch at module level" in text


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_named_path_and_module_exists(page):
    problems = problems_of(references(PAGES[page], page))
    assert not problems, "names in the docs that are not in the repository:\n" + "\n".join(problems)


def test_the_pages_name_things_at_all():
    """Guards the checks above against a pattern that silently matches nothing."""
    found = [r for page, text in PAGES.items() for r in references(text, page)]
    kinds = {r.kind for r in found}
    assert kinds == {"path", "package path", "file name", "dotted name"} and len(found) > 500, kinds


def test_performance_md_is_read_outside_its_measurement_sections():
    text = PAGES["docs/performance.md"]
    assert "## Measurements" in text and "### AMD EPYC Zen 4" not in text and "## Not done yet" in text


# ---- the checks on made-up pages -------------------------------------------------------------------------------

MADE_UP_PAGE = textwrap.dedent("""\
    Real: `tests/docs/doc_snippets.py`, `tests/device/opinfo_status_<dtype>.json`, `benchmarks/common.interleaved`,
    `codegen/llvm/schedule.py` (`schedule.py`), `frontend/stats.compile_records`, `neuroncc.ir.parse`,
    `neuroncc.stats()`, `neuroncc.testing.random_graphs.graphs`, `examples/train_on_device.py`,
    `examples/classifier.py`, docs/cli.md, [the log](performance-history.md).
    Not ours: `torch.ops.neuroncc.philox_seed`, https://github.com/x/y/tests/z.py, `general/nki/test`, `model.py`.
    Broken: `neuroncc/passes/gone.py`, `tools/nothing.py`, `benchmarks/common.no_such_function`,
    `frontend/special_*.py`, `gone_module.py`, `neuroncc.hardware.host_cpu`, `neuroncc.no_such_package.x`,
    docs/gone.md, [a page](gone-page.md).
""")


def test_the_reference_check_fails_on_a_made_up_page():
    problems = problems_of(references(MADE_UP_PAGE, "page.md"))
    broken = [p.split(": ")[1].split(" (")[0] for p in problems]
    assert broken == ["neuroncc/passes/gone.py", "tools/nothing.py", "benchmarks/common.no_such_function",
                      "frontend/special_*.py", "gone_module.py", "neuroncc.hardware.host_cpu",
                      "neuroncc.no_such_package.x", "docs/gone.md", "gone-page.md"], problems
    assert all(p.startswith(("page.md:6:", "page.md:7:", "page.md:8:")) for p in problems)
    names = {r.text for r in references(MADE_UP_PAGE, "page.md")}
    assert not names & {"neuroncc.philox_seed", "tests/z.py", "z.py", "nki/test"}


MADE_UP_ARCHITECTURE = textwrap.dedent("""\
    | rank | package | owns | may import |
    |---|---|---|---|
    | - | `errors.py` | errors | nothing |
    | 0 | `low/` | facts (`deep/`) | errors |
    | 1 | `mid/` | the rest | + low |
    | - | `testing/` | tests | everything |

    Data flows from `low/` to `mid/sub/`.
""")


@pytest.mark.parametrize("packages, layers, fragment", [
    ({"low", "low/deep", "mid", "mid/sub", "testing"}, {"low": 0, "mid": 1}, None),
    ({"low", "low/deep", "mid", "mid/sub", "testing", "new"}, {"low": 0, "mid": 1, "new": 2}, "'new' has no row"),
    ({"low", "low/deep", "low/hidden", "mid", "mid/sub", "testing"}, {"low": 0, "mid": 1}, "'low/hidden/' is named"),
    ({"low", "low/deep", "mid", "testing"}, {"low": 0, "mid": 1}, "'mid/sub/' is named as a package, and there is"),
    ({"low", "mid", "mid/sub", "testing"}, {"low": 0, "mid": 1}, "'deep/' is named as a package, and there is none"),
    ({"low", "low/deep", "mid/sub", "testing"}, {"low": 0}, "a row for 'mid', which is no package"),
    ({"low", "low/deep", "mid", "mid/sub", "testing"}, {"low": 0, "mid": 2}, "'mid' is at rank 1 in the table, 2"),
])
def test_the_architecture_check_fails_on_a_made_up_page(packages, layers, fragment):
    problems = architecture_problems(MADE_UP_ARCHITECTURE, packages, {"errors.py"}, layers, {"errors", "testing"})
    if fragment is None:
        assert problems == []
    else:
        assert any(fragment in p for p in problems), problems
