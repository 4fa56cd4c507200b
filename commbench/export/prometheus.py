"""`commbench export prometheus RUN...`: the runs' rows as one Prometheus text exposition (metrics.py says which
families and labels), checked before it is written: a set of labels that two samples of one family share would make
Prometheus reject the whole scrape, so it is refused here in one line instead."""

from pathlib import Path

from commbench.errors import CommbenchError
from commbench.export import exposition, sources
from commbench.export.metrics import KINDS_EXPORTED, Families


def exposition_text(paths: tuple[Path, ...]) -> str:
    families = Families()
    for run in sources.find(paths, KINDS_EXPORTED):
        families.add_run(run)
    for family in families.by_name.values():
        duplicate = family.duplicate()
        if duplicate is not None:
            where = ", ".join(f"{name}={value}" for name, value in duplicate.labels if value)
            raise CommbenchError(f"two rows give the same {family.name} series ({where}): a run holds a row twice; "
                                 "export the runs that hold it separately or re-record it")
    return exposition.text(list(families.by_name.values()))
