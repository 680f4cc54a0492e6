"""The repository root is the package `vidprep`: its layer folders install as `vidprep.conf`,
`vidprep.jobs`, `vidprep.pipeline`, `vidprep.evaluation`, `vidprep.agents`, `vidprep.stages` and `vidprep.store`. Every folder under them is
found, so no module or data file can be left out of a wheel; tests/ stays out. `hydra_plugins/` holds
vidprep's Hydra launcher, which Hydra only takes from that namespace."""

from setuptools import find_namespace_packages, setup

LAYERS = ("agents", "conf", "evaluation", "jobs", "pipeline", "stages", "store")

setup(
    package_dir={"vidprep": "."},
    packages=[f"vidprep.{name}" for name in find_namespace_packages(
        include=[f"{layer}*" for layer in LAYERS], exclude=["*__pycache__*"])]
    + find_namespace_packages(include=["hydra_plugins.*"], exclude=["*__pycache__*"]),
)
