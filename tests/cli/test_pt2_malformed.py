"""A corpus of malformed .pt2 archives: each must give one InputError line, never unpickle, never crash."""

import json
import pickle
import zipfile

import pytest
import torch

from cli_testing import corrupt_after_write, edit_json, first_weight, rewrite, set_weight_field, set_weight_meta

from neuroncc.errors import InputError
from neuroncc.frontend.pt2 import load_exported_program


CASES = {
    "weight use_pickle": (edit_json("weights_config", set_weight_field("use_pickle", True)), "pickle"),
    "constant custom object": (edit_json("constants_config", lambda o: o["config"].update(
        {"obj": {"path_name": "custom_obj_0", "use_pickle": False}})), "pickle"),
    "opaque object": (edit_json("constants_config", lambda o: o["config"].update(
        {"obj": {"path_name": "opaque_obj_0", "use_pickle": False}})), "pickle"),
    "legacy pickled weights": (lambda s, d: d if "weights_config" not in s else d, None),
    "archive_format wrong": (lambda s, d: b"zip" if s == "archive_format" else d, "archive_format"),
    "archive_version other": (lambda s, d: b"7" if s == "archive_version" else d, "version"),
    "archive_version missing": (lambda s, d: None if s == "archive_version" else d, "archive_version"),
    "archive_format missing": (lambda s, d: None if s == "archive_format" else d, "archive_format"),
    "no models": (lambda s, d: None if s.startswith("models/") else d, "no exported program"),
    "model json invalid": (lambda s, d: b"{not json" if s.startswith("models/") else d, "malformed"),
    "model json wrong schema": (lambda s, d: b"{}" if s.startswith("models/") else d, "malformed"),
    "model json array": (lambda s, d: b"[1, 2]" if s.startswith("models/") else d, "malformed"),
    "schema major version": (edit_json("models/", lambda o: o["schema_version"].update({"major": 99})),
                             "another torch version"),
    "weights config missing": (lambda s, d: None if "weights_config" in s else d, "missing"),
    "weights config not json": (lambda s, d: b"\x00\x01" if "weights_config" in s else d, "JSON"),
    "weights config no table": (lambda s, d: b'{"other": 1}' if "weights_config" in s else d, "config"),
    "weights config entry not dict": (edit_json("weights_config", lambda o: o["config"].update({"x": 3})),
                                      "malformed"),
    "weight record missing": (lambda s, d: None if s == "data/weights/weight_0" else d, "missing"),
    "weight record short": (lambda s, d: d[:4] if s == "data/weights/weight_0" else d, "bytes"),
    "absurd shape": (edit_json("weights_config", set_weight_meta("sizes", [{"as_int": 10**12}])),
                     "absurd"),
    "negative size": (edit_json("weights_config", set_weight_meta("sizes", [{"as_int": -3}])),
                      "inconsistent"),
    "rank mismatch": (edit_json("weights_config", set_weight_meta("strides", [{"as_int": 1}, {"as_int": 1}])), "inconsistent"),
    "dtype garbage": (edit_json("weights_config", set_weight_meta("dtype", "float")), "malformed"),
    "tensor_meta missing": (edit_json("weights_config", lambda o: first_weight(o).pop("tensor_meta")),
                            "malformed"),
    "path_name missing": (edit_json("weights_config", lambda o: first_weight(o).pop("path_name")), "malformed"),
    "path traversal name": (edit_json("weights_config", set_weight_field("path_name", "../../etc/passwd")), "pickle"),
    "constants config missing": (lambda s, d: None if "constants_config" in s else d, "missing"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_archive_is_refused(case, good_pt2, tmp_path):
    edit, needle = CASES[case]
    if case == "legacy pickled weights":
        def edit(short, data):
            return data
        path = rewrite(good_pt2, tmp_path / "bad.pt2", edit)
        with zipfile.ZipFile(path, "a") as zf:
            root = zf.namelist()[0].split("/", 1)[0]
            zf.writestr(f"{root}/data/weights/model.pt", pickle.dumps({"w": 1}))
        needle = "pickle"
    else:
        path = rewrite(good_pt2, tmp_path / "bad.pt2", edit)
    with pytest.raises(InputError) as info:
        load_exported_program(path)
    message = str(info.value)
    assert "\n" not in message
    assert needle.lower() in message.lower(), message


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "random", "text", "truncated-half",
                                  "truncated-end", "bitflip-data", "two-roots", "no-root", "empty-zip",
                                  "two-models"])
def test_broken_files_are_refused(kind, good_pt2, tmp_path):
    path = tmp_path / "bad.pt2"
    if kind == "missing":
        path = tmp_path / "nope.pt2"
    elif kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(bytes(range(256)) * 40)
    elif kind == "text":
        path.write_text("def forward(x): return x\n")
    elif kind.startswith("truncated"):
        path.write_bytes(good_pt2.read_bytes())
        corrupt_after_write(path, fraction=0.5 if kind.endswith("half") else 0.97)
    elif kind == "bitflip-data":
        path.write_bytes(good_pt2.read_bytes())
        with zipfile.ZipFile(path) as zf:
            info = next(i for i in zf.infolist() if i.filename.endswith("models/model.json"))
        raw = path.read_bytes()
        name_len = int.from_bytes(raw[info.header_offset + 26: info.header_offset + 28], "little")
        extra_len = int.from_bytes(raw[info.header_offset + 28: info.header_offset + 30], "little")
        corrupt_after_write(path, flip_at=info.header_offset + 30 + name_len + extra_len + 40)
    elif kind in ("two-roots", "no-root", "empty-zip"):
        with zipfile.ZipFile(path, "w") as zf:
            if kind == "two-roots":
                zf.writestr("a/archive_format", "pt2")
                zf.writestr("b/archive_format", "pt2")
            elif kind == "no-root":
                zf.writestr("archive_format", "pt2")
    elif kind == "two-models":
        rewrite(good_pt2, path, lambda s, d: d)
        with zipfile.ZipFile(path, "a") as zf:
            root = zf.namelist()[0].split("/", 1)[0]
            zf.writestr(f"{root}/models/other.json", "{}")
    with pytest.raises(InputError) as info:
        load_exported_program(path)
    assert "\n" not in str(info.value)


def test_valid_archive_loads_without_pickle(good_pt2, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used on a neuroncc load path")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    ep = load_exported_program(good_pt2)
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    monkeypatch.undo()
    expected = torch.export.load(good_pt2).module()(x)
    torch.testing.assert_close(ep.module()(x), expected)


class _NormNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.linear(x))


def test_parameters_and_buffers_keep_their_kinds(tmp_path):
    """BatchNorm's running stats are buffers: loading them as parameters would make torch trace their
    in-place update as a parameter mutation and ask for their gradients."""
    path = tmp_path / "norm.pt2"
    torch.export.save(torch.export.export(_NormNet(), (torch.randn(3, 4),)), path)
    ep = load_exported_program(path)
    assert isinstance(ep.state_dict["linear.weight"], torch.nn.Parameter)
    assert ep.state_dict["linear.weight"].requires_grad
    for name in ("norm.running_mean", "norm.running_var", "norm.num_batches_tracked"):
        assert not isinstance(ep.state_dict[name], torch.nn.Parameter), name
        assert not ep.state_dict[name].requires_grad, name
    reference = torch.export.load(path)
    assert set(ep.state_dict) == set(reference.state_dict)
    for name, tensor in reference.state_dict.items():
        assert isinstance(ep.state_dict[name], torch.nn.Parameter) == isinstance(tensor, torch.nn.Parameter), name
