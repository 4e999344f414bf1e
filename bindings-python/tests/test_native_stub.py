"""The checked-in stub `_native.pyi` matches the built native module: every
function, class, method and property of one is in the other."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Dict, Set

from tinystore import _native


def _stub_names() -> Dict[str, Set[str]]:
    stub = Path(__file__).parent.parent / "python" / "tinystore" / "_native.pyi"
    tree = ast.parse(stub.read_text())
    out: Dict[str, Set[str]] = {"": set()}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[""].add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
            not node.target.id.startswith("_") or node.target.id == "__version__"
        ):
            out[""].add(node.target.id)
        elif isinstance(node, ast.ClassDef):
            out[""].add(node.name)
            out[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"}
    return out


def _module_names() -> Dict[str, Set[str]]:
    out: Dict[str, Set[str]] = {"": {n for n in dir(_native) if not n.startswith("_") or n == "__version__"}}
    for name in out[""]:
        obj = getattr(_native, name)
        if inspect.isclass(obj):
            out[name] = {n for n in vars(obj) if not n.startswith("_")}
    return out


def test_the_stub_matches_the_native_module() -> None:
    assert _stub_names() == _module_names()
