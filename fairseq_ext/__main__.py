"""``python -m fairseq_ext``: list what the plugin registers with fairseq (and the --user-dir path)."""
import inspect
import os


def registrations() -> dict:
    """``{kind: [names]}`` of every fairseq registration whose class lives in ``fairseq_ext``."""
    import fairseq_ext

    fairseq_ext.register()
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    def ours(obj):
        mod = inspect.getmodule(obj)
        return mod is not None and mod.__name__.startswith("fairseq_ext")

    out = {
        "tasks": sorted(n for n, c in TASK_REGISTRY.items() if ours(c)),
        "models": sorted(n for n, c in MODEL_REGISTRY.items() if ours(c)),
        "architectures": sorted(n for n, c in ARCH_MODEL_REGISTRY.items()
                                if ours(c) or n in _plugin_arch_names()),
        "criterions": sorted(n for n, c in CRITERION_REGISTRY.items() if ours(c)),
        "lr_schedulers": sorted(n for n, c in LR_SCHEDULER_REGISTRY.items() if ours(c)),
    }
    out["generators"] = sorted(_generator_classes())
    return out


def _plugin_arch_names():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    return {n for n, fn in ARCH_CONFIG_REGISTRY.items() if fn.__module__.startswith("fairseq_ext")}


def _generator_classes():
    import sys

    from fairseq.sequence_generator import SequenceGenerator

    names = []
    for modname, mod in list(sys.modules.items()):
        if modname.startswith("fairseq_ext.generators.") and mod is not None:
            for name, obj in vars(mod).items():
                if inspect.isclass(obj) and obj.__module__ == modname and issubclass(obj, SequenceGenerator):
                    names.append(name)
    return names


def main() -> None:
    regs = registrations()
    print(f"fairseq_ext user dir: {os.path.dirname(os.path.abspath(__file__))}")
    for kind, names in regs.items():
        print(f"{kind} ({len(names)}): {', '.join(names) if names else '-'}")


if __name__ == "__main__":
    main()
