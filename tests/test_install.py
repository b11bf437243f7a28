"""What an install holds: one distribution per installed file (one libnccl), no broken requirements, each domain's
libraries in its own extra, and a base install that lists, shows and ranks without them."""
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from importlib import metadata

from conftest import ROOT

from recipe_zoo import extras
from recipe_zoo.registry import static_list

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    """The distribution a requirement names, normalised (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def test_each_installed_file_comes_from_one_distribution():
    """Two distributions writing one path (xgboost's nvidia-nccl-cu12 over torch's nvidia-nccl-cu13:
    nvidia/nccl/lib/libnccl.so.2) leave whichever installed last: GPU DDP would load an NCCL torch was not built
    with. An old venv that has it: `rm -rf .venv && make setup`."""
    owners = defaultdict(set)
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        for file in dist.files or ():
            if "__pycache__" not in file.parts and not file.parts[0].endswith(".dist-info"):
                owners[file.as_posix()].add(name)
    shared = {path: sorted(names) for path, names in owners.items() if len(names) > 1}
    assert not shared, f"files installed by several distributions: {dict(list(shared.items())[:10])}"
    nccl = owners.get("nvidia/nccl/lib/libnccl.so.2", set())
    assert len(nccl) <= 1  # none on a CPU build of torch


def test_pip_check_finds_no_broken_requirement():
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_domain_has_an_extra_holding_its_libraries():
    """zoo/extras.py's map agrees with pyproject.toml: every recipe domain has an extra, each module it checks comes
    from a distribution that extra lists, none of them is in the base, and [all] names every extra."""
    optional = {extra: {_name(r) for r in reqs} for extra, reqs in PYPROJECT["optional-dependencies"].items()}
    base = {_name(r) for r in PYPROJECT["dependencies"]}
    providers = metadata.packages_distributions()
    domains = {row["name"].split("/")[0] for row in static_list()}
    assert domains == set(extras.MODULES), domains ^ set(extras.MODULES)
    for domain, modules in extras.MODULES.items():
        assert domain in optional, f"no [{domain}] extra in pyproject.toml"
        for module in modules:
            dists = {_name(d) for d in providers.get(module, [])}
            assert dists & optional[domain], f"{module} ({dists}) is not in the [{domain}] extra"
            assert not dists & base, f"{module} is in the base install"
    (everything,) = PYPROJECT["optional-dependencies"]["all"]
    named = set(re.search(r"\[(.*)\]", everything).group(1).split(","))
    assert named == set(optional) - {"all", "test"}, named ^ (set(optional) - {"all", "test"})
    assert {"xgboost", "biopython"}.isdisjoint(set().union(base, *optional.values()))  # xgboost-cpu; BLOSUM62 inline


BASE_ONLY = """
import sys
for module in {blocked!r}:
    sys.modules[module] = None  # as if only the base were installed
from recipe_zoo.cli import main
for argv in {commands!r}:
    code = main(argv)
    print("EXIT", code, flush=True)
"""


def test_the_base_install_lists_shows_and_ranks_and_a_run_names_the_missing_extra(tmp_path):
    """Without any domain library: `zoo list`, `zoo show` of every recipe and `zoo board` work; `zoo run` of a
    recipe stops before its run starts with one line naming the `pip install` (exit 2)."""
    blocked = sorted({m for mods in extras.MODULES.values() for m in mods})
    names = [row["name"] for row in static_list()]
    commands = [["list"], *(["show", n] for n in names), ["board"],
                ["run", "tabular/xgb", "data=wine", "--out", str(tmp_path / "runs")],
                ["doctor", "vision/resnet", "--out", str(tmp_path / "runs")]]
    proc = subprocess.run([sys.executable, "-c", BASE_ONLY.format(blocked=blocked, commands=commands)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    codes = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("EXIT ")]
    assert codes == [0] * (len(commands) - 2) + [2, 2], proc.stdout[-3000:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("zoo: error")]
    assert errors == ["zoo: error: tabular/xgb needs the tabular extra (xgboost, pandas not installed): "
                      "pip install 'recipe-zoo[tabular]'",
                      "zoo: error: vision/resnet needs the vision extra (timm not installed): "
                      "pip install 'recipe-zoo[vision]'"], proc.stderr[-3000:]
    assert not (tmp_path / "runs").exists()  # nothing started


def test_requires_python_and_torch_floors_match_what_the_code_uses():
    """tomllib (zoo run --config FILE.toml) is 3.11+; torch.distributed.fsdp.fully_shard (fsdp=true) is public
    from torch 2.6."""
    assert PYPROJECT["requires-python"] == ">=3.11"
    torch_req = next(r for r in PYPROJECT["dependencies"] if _name(r) == "torch")
    assert tuple(int(x) for x in re.search(r">=([\d.]+)", torch_req).group(1).split(".")) >= (2, 6)
