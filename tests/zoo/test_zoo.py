"""The model zoo: 20 families built from the transformers library's config classes (tiny configs, no downloads),
compiled with ``backend="neuron"`` and compared with eager.

- with every dropout probability zeroed: two AdamW steps (loss at each step, then every parameter) and
  inference (every output tensor) match eager within 1e-4;
- with their shipped dropout (the families whose configs ship some): two AdamW steps with no fallback op, then
  the loss distribution of a training-mode forward over dropout masks is eager's (the masks are drawn by the
  compiled graphs' Philox random ops, so no single loss is eager's, only as likely);
- a decoder LM over 3 sequence lengths and a repeat with TorchDynamo's default dynamic shapes;
- with their parameters cast to bf16 or float16 (a decoder LM, an encoder with its pooler, a vision model with
  LayerNorm over channels): the loss, every gradient and the inference outputs as close to float64's as eager's.
"""

from __future__ import annotations

import copy
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import neuroncc

from .families import FAMILIES, SEQ, batch, build, has_dropout

TOL = {"rtol": 1e-4, "atol": 1e-4}

#: The families whose models ship dropout (or stochastic depth) as configured: their training draws random
#: numbers (ALBERT's only in its classification head).
SHIPPED_DROPOUT = ("gpt2", "opt", "bert", "roberta", "distilbert", "albert", "t5", "bart", "swin")
#: The shipped-dropout families CI trains (each ~20-30 s on 2 cores): one per way the zoo draws random numbers
#: (a decoder LM's dropout, an encoder's, a classification head's only, an encoder-decoder's, stochastic depth).
#: Their siblings (OPT as GPT-2, RoBERTa and DistilBERT as BERT, BART as T5) run with NEURONCC_FULL_ZOO=1.
DROPOUT_IN_CI = ("gpt2", "bert", "albert", "t5", "swin")
FULL_ZOO = os.environ.get("NEURONCC_FULL_ZOO") == "1"


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    # eps=1e-6: some gradients are mathematically zero (attention key biases: softmax ignores a constant shift
    # of the logits); float noise of ~1e-9 in them would become full-size Adam steps with the default 1e-8,
    # steps no two implementations agree on. Real gradients here are >> 1e-6, so nothing else changes.
    return torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6)


def _tensors(output: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(output.to_tuple() if hasattr(output, "to_tuple") else output)
            if isinstance(t, torch.Tensor)]


def _train(model: torch.nn.Module, run: Any, inputs: dict[str, Any], steps: int = 2) -> list[torch.Tensor]:
    optimizer = _optimizer(model)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = run(**inputs).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


#: Families CI leaves to NEURONCC_FULL_ZOO=1 because another family runs every layer and op of theirs: Mistral's
#: graph is Qwen2's (configured with a sliding second layer) without the q/k/v biases (tests/zoo/families.py).
COVERED_BY_A_SIBLING = ("mistral",)


@pytest.mark.parametrize("name", [name if name not in COVERED_BY_A_SIBLING else pytest.param(
    name, marks=pytest.mark.skipif(not FULL_ZOO, reason="another family runs its graph; NEURONCC_FULL_ZOO=1 runs it"))
    for name in FAMILIES])
def test_training_and_inference_match_eager(name):
    family = FAMILIES[name]
    eager = build(family, dropout=False)
    assert not has_dropout(eager)
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron")
    inputs = batch(family)
    for step, (mine, theirs) in enumerate(zip(_train(ours, compiled, inputs), _train(eager, eager, inputs))):
        torch.testing.assert_close(mine, theirs, **TOL, msg=lambda m, s=step: f"loss at step {s}: {m}")
    for (key, p_eager), p_ours in zip(eager.named_parameters(), ours.parameters()):
        torch.testing.assert_close(p_ours, p_eager, **TOL, msg=lambda m, k=key: f"{k}: {m}")
    # Inference is compared on the same weights. Training is judged above; carrying its drift into the outputs
    # would judge rounding instead: a gradient that is zero in exact arithmetic (CLIP's text-layer q/k
    # projections: 4e-17 in float64) is fp32 noise (~2e-8) in eager and in ours alike, and AdamW's g/sqrt(v)
    # turns either noise into a full-size step in a random direction, so two correct fp32 implementations end
    # up 5e-5 apart in those weights and 2e-4 apart in the outputs (seen on an Intel AVX-512 machine).
    eager.load_state_dict(ours.state_dict())
    eager.eval()
    ours.eval()
    with torch.no_grad():
        expected, got = _tensors(eager(**inputs)), _tensors(compiled(**inputs))
    assert len(got) == len(expected) > 0
    for index, (mine, theirs) in enumerate(zip(got, expected)):
        torch.testing.assert_close(mine, theirs, **TOL, msg=lambda m, i=index: f"inference output #{index}: {m}")
    counts = neuroncc.stats()
    assert counts["fallback_ops"] == 0
    assert counts["backward_graphs"] >= 1 and counts["inference_graphs"] >= 1


def test_qwen2_runs_what_mistral_runs():
    """Why CI leaves Mistral to NEURONCC_FULL_ZOO=1: the Qwen2 it trains has a full-attention layer and a
    sliding-window one (a window shorter than the batch's sequences: Mistral's mask), with q/k/v biases."""
    layers = build(FAMILIES["qwen2"], dropout=False).model.layers
    assert [layer.self_attn.sliding_window for layer in layers] == [None, 4] and 4 < SEQ
    assert all(getattr(layer.self_attn, projection).bias is not None
               for layer in layers for projection in ("q_proj", "k_proj", "v_proj"))


def test_the_shipped_dropout_list_is_what_the_models_do():
    shipped = [name for name, family in FAMILIES.items() if has_dropout(build(family, dropout=True))]
    assert sorted(shipped) == sorted(SHIPPED_DROPOUT)


#: Training-mode forward calls per side when comparing compiled and eager loss distributions.
DRAWS = 96
#: How many standard errors the compiled statistics may sit from eager's. Every draw is seeded, so a run is
#: deterministic; 4 standard errors keep a correct compiler inside the bounds for any seed with near
#: certainty (about 1 in 10^4 per statistic).
Z_BOUND = 4.0


def _random_draws_per_eager_forward(model: torch.nn.Module, inputs: dict[str, Any]) -> int:
    """The random aten ops (dropout's ``bernoulli_``, stochastic depth's ``rand``, ...) one eager forward runs."""
    class Count(TorchDispatchMode):
        draws = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # CPU flash attention carries the tag for a dropout_p its kernel refuses (with dropout, SDPA takes
            # the math path, whose bernoulli_ this counts)
            if torch.Tag.nondeterministic_seeded in func.tags and "scaled_dot_product" not in func.name():
                Count.draws += 1
            return func(*args, **(kwargs or {}))

    with Count():
        model(**inputs)
    return Count.draws


def _random_draws_per_compiled_forward(dump_dir: Path) -> int:
    """The generator ops (each random aten op becomes one ``philox_*`` op) of one compiled forward: summed over
    the frames (GPT-2 computes its loss in a second frame), counted once per frame, whose specializations
    (classification heads set ``config.problem_type`` on their first call, a guard that fails once) must agree."""
    per_frame: dict[str, set[int]] = {}
    for path in dump_dir.glob("*_forward.nir"):
        frame = path.name.split("_")[0]
        per_frame.setdefault(frame, set()).add(len(re.findall(r"= philox_(?:uniform|bits) ", path.read_text())))
    assert all(len(counts) == 1 for counts in per_frame.values()), per_frame
    return sum(counts.pop() for counts in per_frame.values())


def _loss_draws(run: Any, inputs: dict[str, Any]) -> torch.Tensor:
    return torch.tensor([run(**inputs).loss.item() for _ in range(DRAWS)], dtype=torch.float64)


def _standard_errors_apart(ours: torch.Tensor, eager: torch.Tensor) -> tuple[float, float]:
    """How far the compiled loss distribution is from eager's, in standard errors: of the difference of the
    means (Welch), and of the log of the ratio of the variances (Var[log s^2] ~ 2 / (n - 1) per side)."""
    n = len(ours)
    assert eager.var() > 0, "eager's loss does not vary: the model draws no random numbers"
    mean = (ours.mean() - eager.mean()) / ((ours.var() + eager.var()) / n).sqrt()
    spread = torch.log(ours.var() / eager.var()) / math.sqrt(4 / (n - 1))  # -inf if ours never varies
    return float(mean), float(spread)


@pytest.mark.parametrize("name", [name if name in DROPOUT_IN_CI else pytest.param(name, marks=pytest.mark.skipif(
    not FULL_ZOO, reason="a sibling of a family CI trains with its dropout; NEURONCC_FULL_ZOO=1 runs it"))
    for name in SHIPPED_DROPOUT])
def test_shipped_dropout_trains(name, tmp_path):
    """Two AdamW steps compile with no fallback; then, at the trained parameters, the loss of a training-mode
    forward has eager's distribution over dropout masks (mean and spread within Z_BOUND standard errors over
    DRAWS calls each), and the compiled forward draws at every site eager draws at.

    The dropout masks come from the compiled graphs' Philox ops, so no single loss is eager's, only as likely.
    Comparing one compiled loss with the range of a few eager seeds (the test before issue #22) is too narrow:
    OPT's and BERT's fell just below a 5-seed range while 80 seeds of each agree (means within 0.5 standard
    errors). This comparison fails on a compiler that disables dropout (no spread), forgets the 1/(1-p) scale
    (mean), or drops a site (the count); tests/frontend/test_random.py checks each op's fraction and scale.
    """
    family = FAMILIES[name]
    model = build(family, dropout=True)
    assert has_dropout(model)
    inputs = batch(family)
    compiled = torch.compile(model, backend="neuron", options={"dump_dir": str(tmp_path)})
    torch.manual_seed(100)
    losses = _train(model, compiled, inputs)
    assert all(torch.isfinite(loss) for loss in losses)
    assert neuroncc.stats()["fallback_ops"] == 0
    draws = _random_draws_per_eager_forward(model, inputs)
    assert draws > 0 and _random_draws_per_compiled_forward(tmp_path) == draws
    torch.manual_seed(200)
    ours, eager = _loss_draws(compiled, inputs), _loss_draws(model, inputs)
    mean, spread = _standard_errors_apart(ours, eager)
    assert abs(mean) <= Z_BOUND and abs(spread) <= Z_BOUND, (
        f"compiled loss {ours.mean():.5f} +- {ours.std():.5f} vs eager's {eager.mean():.5f} +- {eager.std():.5f} "
        f"over {DRAWS} draws: means {mean:+.1f}, log variance ratio {spread:+.1f} standard errors apart")


#: The dynamic-shapes test's sequence lengths: the first compiles static; the second makes TorchDynamo's graph
#: symbolic (the first specialization, a longer length); the third is a new, shorter one (the second
#: specialization); the last repeats a length seen, which must run without compiling. Together they cover a
#: length under one AVX2 vector of floats (5), an exact one (8) and one with a remainder (11). A fourth new
#: length (the test before session 22 ran 5, 8, 11, 6) compiled the forward and backward graphs of every frame
#: once more for a length of the same kind as 5 (gpt2: 16 -> 12 graphs).
LENGTHS = (5, 11, 8, 11)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_default_dynamic_shapes_over_sequence_lengths(name):
    """No dynamic=False: the second length makes TorchDynamo's graph symbolic; every length matches eager,
    forward and gradients (a static specialization per new length, none for a length seen before)."""
    family = FAMILIES[name]
    eager = build(family, dropout=False)
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron")
    specializations = []
    for length in LENGTHS:
        ids = torch.randint(2, 128, (2, length), generator=torch.Generator().manual_seed(length))
        expected, got = eager(input_ids=ids, labels=ids), compiled(input_ids=ids, labels=ids)
        torch.testing.assert_close(got.logits, expected.logits, **TOL)
        expected.loss.backward()
        got.loss.backward()
        for (key, p_eager), p_ours in zip(eager.named_parameters(), ours.parameters()):
            torch.testing.assert_close(p_ours.grad, p_eager.grad, **TOL, msg=lambda m, k=key: f"{k}: {m}")
        eager.zero_grad()
        ours.zero_grad()
        specializations.append(neuroncc.stats()["shape_specializations"])
    # static first; a specialization (per frame) for each new length after it; none for the repeat
    assert specializations[0] == 0 < specializations[1] < specializations[2] == specializations[3], specializations


#: Families trained with their parameters cast to a low-precision float (``model.to(dtype)``, not autocast), one per
#: kind of graph: a decoder LM (GPT-2: LayerNorm, GELU, tied embeddings), an encoder with its pooler (BERT: the
#: CLS token's row selected after a bf16 LayerNorm, whose compile raised before session 26), a vision model with
#: LayerNorm over channels (ConvNeXt: depthwise convolutions); BERT in float16 too.
#: ResNet is not here: its bf16 gradients are ill-conditioned (BatchNorm over few channels and values), eager's own
#: are up to 0.4-1.6 of their norm from float64's depending on the batch (ours 0.14-0.50, the same spread).
LOW_PRECISION = [("gpt2", torch.bfloat16), ("bert", torch.bfloat16), ("convnext", torch.bfloat16),
                 ("bert", torch.float16)]
#: How many times eager's own error (against float64 from the same low-precision weights and inputs) a compiled
#: tensor's may be, plus LOW_PRECISION_ULPS of the dtype's epsilon: fusing keeps intermediates in float32, so
#: the compiled error is most often below eager's; the sweep of every family (3 batches each, session 26) saw
#: at most 2.1x where eager's error was not itself below an ulp.
LOW_PRECISION_FACTOR = 2.0
LOW_PRECISION_ULPS = 1.0


def _cast(inputs: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    return {key: value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value
            for key, value in inputs.items()}


def _errors(got: list[torch.Tensor], reference: list[torch.Tensor]) -> list[float]:
    """Each tensor's distance from its float64 reference, relative to the reference's norm (at least a
    thousandth of the largest reference's: a gradient that is zero in exact arithmetic, such as an attention key
    bias's, is rounding noise in every implementation and is judged on the scale of the others)."""
    floor = 1e-3 * max(float(r.norm()) for r in reference)
    return [float((g.double() - r).norm()) / max(float(r.norm()), floor) for g, r in zip(got, reference)]


def _judge(what: str, names: list[str], ours: list[torch.Tensor], eager: list[torch.Tensor],
           reference: list[torch.Tensor], dtype: torch.dtype) -> None:
    ulp = LOW_PRECISION_ULPS * torch.finfo(dtype).eps
    worse = [f"{name}: {mine:.4f} vs eager's {theirs:.4f}" for name, mine, theirs in
             zip(names, _errors(ours, reference), _errors(eager, reference))
             if not mine <= LOW_PRECISION_FACTOR * theirs + ulp]  # (a NaN error is worse: NaN > x is False)
    assert not worse, f"{what} further from float64 than eager {dtype}'s: " + "; ".join(worse)


def test_a_nan_result_is_judged_worse_than_eagers():
    # (a NaN loss compared False with eager's error and passed: the checking build's NaN from a buffer read before
    # it was written, session 37's fault put back, went unnoticed)
    reference, eager = [torch.tensor([1.0, 2.0], dtype=torch.float64)], [torch.tensor([1.0, 2.0])]
    with pytest.raises(AssertionError, match="nan"):
        _judge("the loss", ["loss"], [torch.tensor([float("nan"), 2.0])], eager, reference, torch.bfloat16)
    _judge("the loss", ["loss"], [torch.tensor([1.0, 2.0])], eager, reference, torch.bfloat16)


@pytest.mark.parametrize("name, dtype", LOW_PRECISION, ids=[f"{n}-{str(d)[6:]}" for n, d in LOW_PRECISION])
def test_low_precision_parameters_train_and_infer(name, dtype):
    """A model cast to bf16 or float16: its loss, every parameter's gradient and the inference outputs are as
    close to float64's (a copy of the same low-precision weights, on the same inputs) as eager's, within
    LOW_PRECISION_FACTOR times eager's error plus LOW_PRECISION_ULPS. Judging both against float64 rather than
    each other: two correct low-precision implementations round at different places (a fused kernel keeps
    float32 where eager rounds each op's result), so their gradients differ by a few ulps, and by more where a
    gradient is a sum that cancels."""
    family = FAMILIES[name]
    eager = build(family, dropout=False).to(dtype)
    ours, reference = copy.deepcopy(eager), copy.deepcopy(eager).to(torch.float64)
    compiled = torch.compile(ours, backend="neuron")
    inputs = batch(family)
    losses = [run(**_cast(inputs, precision)).loss for run, precision in
              ((compiled, dtype), (eager, dtype), (reference, torch.float64))]
    for loss in losses:
        loss.backward()
    _judge("the loss", ["loss"], *([loss.detach()] for loss in losses), dtype)
    names = [key for key, _ in reference.named_parameters()]
    _judge("gradients", names, *([p.grad for p in model.parameters()] for model in (ours, eager, reference)), dtype)
    for model in (ours, eager, reference):
        model.eval()
    with torch.no_grad():
        outputs = [_tensors(run(**_cast(inputs, precision))) for run, precision in
                   ((compiled, dtype), (eager, dtype), (reference, torch.float64))]
    assert len(outputs[0]) == len(outputs[2]) > 0
    _judge("inference outputs", [f"output #{i}" for i in range(len(outputs[2]))], *outputs, dtype)
    counts = neuroncc.stats()
    assert counts["fallback_ops"] == 0
    assert counts["backward_graphs"] >= 1 and counts["inference_graphs"] >= 1
