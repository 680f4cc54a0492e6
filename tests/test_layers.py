"""The layering rule of the README's "How it works": a module imports only from its own layer or the
layers below it, read from every module's imports (those inside functions included)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Bottom to top; a module belongs to the longest prefix that names it.
LAYERS = ["conf", "store", "stages.context", "stages.media", "stages.prompts", "stages.models", "stages", "agents",
          "evaluation", "pipeline", "jobs"]


def layer(module: str) -> int:
    return max((i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")),
               key=lambda i: len(LAYERS[i]))


def test_no_module_imports_from_a_layer_above_it():
    upward = []
    for path in sorted(REPO.glob("*/**/*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if not module.startswith(tuple(LAYERS)):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                if name.startswith("vidprep.") and layer(name[len("vidprep."):]) > layer(module):
                    upward.append(f"{module} imports {name}")
    assert not upward, upward
