"""Import every module of a sub-package (the plugin's own registration helper).

Each sub-package ``__init__`` calls :func:`import_all` so that adding a file is enough to register
what it defines, as fairseq does for its own ``models/`` and ``tasks/``.
"""
import importlib
import os


def import_all(package_name: str, package_file: str) -> None:
    folder = os.path.dirname(package_file)
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith(("_", ".")):
            continue
        if name.endswith(".py"):
            importlib.import_module(f"{package_name}.{name[:-3]}")
        elif os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py")):
            importlib.import_module(f"{package_name}.{name}")
